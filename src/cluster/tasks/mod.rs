//! Tasks, the 2026-07-28 extension `io.modelcontextprotocol/tasks`: a tool call the server
//! answers at once with a task id, runs on, and lets the client poll (`tasks/get`), answer
//! (`tasks/update`) and cancel (`tasks/cancel`).
//!
//! A task is a [`TaskRecord`]. Its runner (see [`runner`]) is its only writer: it stores the
//! record when the task is created and at every change of status or of outstanding asks, in
//! this node's memory and, when `[redis]` is configured, in Redis, so that any node can
//! answer `tasks/get` for it. What steers a running task (answers, a cancel) goes to its
//! runner as a [`Signal`]: straight to it when it runs on this node, through the Redis
//! bridge of the change bus when it runs on another.
//!
//! Every status a runner stores is also published on the change bus, for the
//! `subscriptions/listen` streams that asked for the task (`taskIds`).
//!
//! A task belongs to the identity that created it: another identity is told it does not
//! exist. Task ids are random UUIDs (122 random bits), never guessable. Within its identity,
//! a task is for the credentials that may use its tool: every task method (and a listen
//! stream's `notifications/tasks`) checks the caller's policy for the tool, as `tools/call`
//! does, so a narrower credential of the same subject cannot read, answer or cancel the
//! task of a tool it may not call.
//!
//! This node's memory is bounded: `tasks.max_stored` records and `tasks.max_stored_bytes`
//! bytes of them (their JSON). A record is forgotten once its task expires, by a sweep every
//! [`SWEEP_EVERY`] (and at once when a new task finds the store full), which looks only at
//! a clock while no record has expired.

pub(crate) mod end;
pub(crate) mod runner;

use crate::cluster::Cluster;
use crate::config::TaskSettings;
use crate::context::{Identity, Proof};
use crate::observe::metrics::Metrics;
use crate::protocol::mcp::{Error, TaskLimit};
use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

/// Signals a runner may hold before it reads them (one client steering one task).
const SIGNAL_CAPACITY: usize = 16;
/// The longest a `tasks/update` or `tasks/cancel` waits for the task's runner (on this
/// node) to have applied it, past which it is acknowledged anyway (the extension's
/// acknowledgements are eventually consistent); and the longest a signal waits for room in
/// a full queue, past which a local one is refused (-32008 `task`).
const APPLY_WAIT: Duration = Duration::from_secs(2);
/// Answers and cancels from other nodes waiting at once for room in full queues of this
/// node's runners; more are dropped (logged). The other node acknowledged each as it
/// published it, so nothing else bounds how many come: unbounded, each waiting answer held
/// its `responses` (up to a message each) for [`APPLY_WAIT`].
const REMOTE_SIGNALS_WAITING: usize = 64;

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Running.
    Working,
    /// Waiting for the client's answers (`inputRequests`).
    InputRequired,
    /// Done; `result` holds the tool's result (an `isError` one too).
    Completed,
    /// Ended by a protocol-level error; `error` holds it.
    Failed,
    /// Cancelled by the client.
    Cancelled,
}

impl TaskStatus {
    /// Whether the status never changes again.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }

    /// Its name on the wire (as serialized).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Working => "working",
            Self::InputRequired => "input_required",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

/// A task as stored, and (through [`TaskRecord::fields`]) as shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TaskRecord {
    pub id: String,
    /// The principal of the identity that created it (`Identity::principal`).
    pub owner: String,
    /// The tool it runs, by the name it was called with: the caller's policy for it is
    /// checked on every task method. Empty in records stored before it was kept; those
    /// are for credentials that may use every tool.
    #[serde(default)]
    pub tool: String,
    pub status: TaskStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// Unix time in ms.
    pub created_ms: u64,
    /// Unix time in ms.
    pub updated_ms: u64,
    pub ttl_ms: u64,
    pub poll_interval_ms: u64,
    /// The outstanding asks, by key, while `input_required`.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub input_requests: Map<String, Value>,
    /// The tool's result, once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The JSON-RPC error object, once failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    /// The node running it (`Cluster::node_number`); 0 in records stored before it was
    /// kept. Read from Redis by another node while that one is dead, a task not finished is
    /// shown failed (see [`load`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub node: u64,
}

/// Whether a record's `node` is unknown (not written).
fn is_zero(node: &u64) -> bool {
    *node == 0
}

impl TaskRecord {
    /// A task just created, working, of the tool `tool`, for `owner`.
    pub fn new(owner: &str, tool: &str, settings: &TaskSettings) -> Self {
        let now = unix_ms();
        Self {
            id: uuid::Uuid::new_v4().to_string(),
            owner: owner.to_owned(),
            tool: tool.to_owned(),
            status: TaskStatus::Working,
            status_message: None,
            created_ms: now,
            updated_ms: now,
            ttl_ms: settings.ttl_ms,
            poll_interval_ms: settings.poll_interval_ms,
            input_requests: Map::new(),
            result: None,
            error: None,
            node: 0,
        }
    }

    /// Unix time in ms when the task expires.
    pub fn expires_ms(&self) -> u64 {
        self.created_ms.saturating_add(self.ttl_ms)
    }

    /// How long it has left.
    pub fn remaining(&self) -> Duration {
        Duration::from_millis(self.expires_ms().saturating_sub(unix_ms()))
    }

    /// Moves to `status` (stamping the time), with what that status carries.
    pub fn set(&mut self, status: TaskStatus) {
        self.status = status;
        self.updated_ms = unix_ms();
        if status != TaskStatus::InputRequired {
            self.input_requests.clear();
        }
    }

    /// The `Task` members (`CreateTaskResult`); with `detailed`, those of the status
    /// (`inputRequests`, `result`, `error`) too (`tasks/get`, `notifications/tasks`).
    pub fn fields(&self, detailed: bool) -> Map<String, Value> {
        let mut task = Map::new();
        task.insert("taskId".into(), json!(self.id));
        task.insert("status".into(), json!(self.status));
        if let Some(message) = &self.status_message {
            task.insert("statusMessage".into(), json!(message));
        }
        task.insert("createdAt".into(), json!(rfc3339(self.created_ms)));
        task.insert("lastUpdatedAt".into(), json!(rfc3339(self.updated_ms)));
        task.insert("ttlMs".into(), json!(self.ttl_ms));
        task.insert("pollIntervalMs".into(), json!(self.poll_interval_ms));
        if detailed {
            match self.status {
                TaskStatus::InputRequired => {
                    task.insert(
                        "inputRequests".into(),
                        Value::Object(self.input_requests.clone()),
                    );
                }
                TaskStatus::Completed => {
                    task.insert("result".into(), self.result.clone().unwrap_or(json!({})));
                }
                TaskStatus::Failed => {
                    let error = self.error.clone().unwrap_or_else(|| {
                        serde_json::to_value(Error::Internal.to_wire()).unwrap_or_default()
                    });
                    task.insert("error".into(), error);
                }
                TaskStatus::Working | TaskStatus::Cancelled => {}
            }
        }
        task
    }
}

/// What steers a running task.
#[derive(Debug)]
pub(crate) enum Signal {
    /// The client's answers to outstanding asks; `applied` is told once they are stored.
    Answer {
        responses: Map<String, Value>,
        applied: Option<oneshot::Sender<()>>,
    },
    /// The client cancels the task; `applied` is told once it is stored as cancelled.
    Cancel {
        applied: Option<oneshot::Sender<()>>,
    },
}

/// A task record as this node keeps it, with the bytes it counts for.
#[derive(Debug)]
struct Kept {
    record: TaskRecord,
    /// The length of the record's JSON.
    bytes: u64,
}

/// What the store holds of one owner's tasks.
#[derive(Debug, Default, Clone, Copy)]
struct Share {
    count: usize,
    bytes: u64,
}

/// The tasks of this node. See the module docs.
pub(crate) struct Tasks {
    settings: TaskSettings,
    metrics: Arc<Metrics>,
    /// Tasks created on this node (running or done), until they expire.
    records: DashMap<String, Kept>,
    /// The sum of the `bytes` of `records`: changed only under the lock of the entry whose
    /// bytes change, so it never drifts from them.
    stored_bytes: AtomicU64,
    /// Unix ms before which no record of `records` expires: until then a sweep has nothing
    /// to forget and does not look at them.
    next_expiry: AtomicU64,
    /// Tasks running on this node: how to reach their runner.
    running: DashMap<String, mpsc::Sender<Signal>>,
    /// Tasks running on this node: where their runner stands in claiming their end (see
    /// [`end`]), for `tasks/get` here to tell whether the memory's record may be one
    /// another node showed failed meanwhile.
    holds: DashMap<String, end::TaskHold>,
    /// Set once the shutdown grace ran out: every runner fails its task. A watch, not a
    /// signal in each runner's queue, which the client's own signals may fill.
    stopping: tokio::sync::watch::Sender<bool>,
    /// One permit per task running on this node.
    slots: Arc<Semaphore>,
    /// One permit per answer or cancel from another node waiting for room in a runner's
    /// queue.
    remote_waiting: Arc<Semaphore>,
    /// Tasks running on this node by authenticated identity (principal), each within
    /// `per_identity`: one entry per identity running some, removed at zero, so bounded by
    /// `max_running` (as `perimeter::connections` counts sessions).
    by_identity: Arc<DashMap<Arc<str>, usize>>,
    /// `tasks.running_per_identity()`; 0: no limit.
    per_identity: usize,
    /// What `records` holds of each owner (the principal that created them): one entry per
    /// owner with records, removed at its last, so bounded by `max_stored`. Changed under
    /// the lock of the record's entry, as `stored_bytes` is: locked after `records` (in
    /// `keep` and `sweep`), never before it.
    stored_by_owner: DashMap<String, Share>,
    /// `tasks.stored_per_identity()`: each authenticated identity's share of the store by
    /// count and by bytes (0: no limit), checked as it creates a task, and the bytes also as
    /// its records grow ([`keep`](Self::keep)).
    stored_per_identity: (usize, u64),
    /// Tasks of `records` whose last record Redis did not take (it was paused or away):
    /// written again once it answers ([`write_back`]), or pushed at a beat it does not
    /// answer in time ([`push_unsaved`]), or the other nodes would show a finished task as
    /// working until it expires. Within `records`, so bounded as it is.
    unsaved: std::sync::Mutex<Unsaved>,
    /// A [`push_unsaved`] pass is under way: one at a time.
    pub(crate) pushing: std::sync::atomic::AtomicBool,
    /// Redis lost what it held, and this node's records are not all written again yet: it
    /// says so in Redis while this is set (`cluster::rewrite`).
    rewriting: std::sync::atomic::AtomicBool,
}

/// The ids of the task records Redis did not take, in the order they are to be sent: a set
/// to tell whether one waits, a queue for their order. A pass takes from the front and puts
/// those Redis did not answer at the back, so that none is starved behind the same first
/// ones (as the dedup results a failed beat pushes, review 57 #1). An id let go from the set
/// stays in the queue until it is met, or until the queue holds twice the set (then the
/// queue is swept): bounded by the records, as the set is.
#[derive(Debug, Default)]
struct Unsaved {
    queue: std::collections::VecDeque<String>,
    set: std::collections::HashSet<String>,
}

impl Unsaved {
    fn insert(&mut self, id: String) {
        if self.set.insert(id.clone()) {
            self.queue.push_back(id);
        }
    }

    fn remove(&mut self, id: &str) {
        if self.set.remove(id) {
            self.sweep_queue();
        }
    }

    fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// Takes (lets go of) the first `n` ids waiting, in order.
    fn take(&mut self, n: usize) -> Vec<String> {
        let mut taken = Vec::new();
        while taken.len() < n {
            let Some(id) = self.queue.pop_front() else {
                break;
            };
            if self.set.remove(&id) {
                taken.push(id);
            }
        }
        taken
    }

    fn retain(&mut self, keep: impl Fn(&String) -> bool) {
        self.set.retain(keep);
        self.sweep_queue();
    }

    /// Drops from the queue the ids let go of, once they are as many as those waiting.
    fn sweep_queue(&mut self) {
        if self.queue.len() > 2 * self.set.len() + 64 {
            let set = &self.set;
            self.queue.retain(|id| set.contains(id));
        }
    }
}

impl Tasks {
    /// The tasks of a node run with `settings`, its store's size shown in `metrics`.
    pub fn new(settings: &TaskSettings, metrics: Arc<Metrics>) -> Self {
        Self {
            settings: settings.clone(),
            metrics,
            records: DashMap::new(),
            stored_bytes: AtomicU64::new(0),
            next_expiry: AtomicU64::new(u64::MAX),
            running: DashMap::new(),
            holds: DashMap::new(),
            stopping: tokio::sync::watch::Sender::new(false),
            slots: Arc::new(Semaphore::new(settings.max_running)),
            remote_waiting: Arc::new(Semaphore::new(REMOTE_SIGNALS_WAITING)),
            by_identity: Arc::default(),
            per_identity: settings.running_per_identity(),
            stored_by_owner: DashMap::new(),
            stored_per_identity: settings.stored_per_identity(),
            unsaved: std::sync::Mutex::default(),
            pushing: std::sync::atomic::AtomicBool::new(false),
            rewriting: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Marks every record this node keeps as not saved: written again at the next round
    /// Redis answers (Redis lost them).
    pub(crate) fn unsave_all(&self) {
        let ids: Vec<String> = self.records.iter().map(|r| r.key().clone()).collect();
        if ids.is_empty() {
            return;
        }
        let mut unsaved = crate::lock(&self.unsaved);
        for id in ids {
            unsaved.insert(id);
        }
        self.rewriting.store(true, Ordering::Release);
    }

    /// Whether records wait to be written to Redis.
    pub(crate) fn has_unsaved(&self) -> bool {
        !crate::lock(&self.unsaved).is_empty()
    }

    /// [`push_unsaved`] for the cluster these tasks are of: a method, as the bridge's other
    /// ways into the tasks are: this module calls the bridge (`send_task_steer`), and a
    /// path back from it would make the two reach themselves (the layer rule, `layers.rs`).
    pub(crate) async fn push_unsaved(&self, cluster: &Cluster) {
        push_unsaved(cluster).await;
    }

    /// Whether Redis lost this node's task records and they are not all written again yet.
    pub(crate) fn is_rewriting(&self) -> bool {
        self.rewriting.load(Ordering::Acquire)
    }

    /// Whether this node keeps a task record (Redis may hold it too).
    pub(crate) fn keeps_records(&self) -> bool {
        !self.records.is_empty()
    }

    /// Room for one more task of `identity`, or -32008: room in the store, by count and by
    /// bytes (after forgetting expired tasks, if it looked full), room in its identity's
    /// share of the store and a place among the tasks it runs (an authenticated one), and a
    /// running slot.
    pub fn reserve(&self, identity: &Identity) -> Result<TaskSlot, Error> {
        let busy = || Error::TooManyTasks {
            scope: TaskLimit::Node,
            limit: self.settings.max_running.min(self.settings.max_stored) as u64,
        };
        let full = || self.records.len() >= self.settings.max_stored;
        let heavy = || self.stored_bytes.load(Ordering::Acquire) >= self.settings.max_stored_bytes;
        if full() || heavy() {
            self.sweep();
            if full() {
                return Err(busy());
            }
            if heavy() {
                return Err(self.too_heavy());
            }
        }
        // Records are owned by the principal (`TaskRecord::owner`).
        let owner = identity.principal();
        if identity.is_authenticated() && self.share_reached(owner).is_some() {
            self.sweep();
            if let Some(limit) = self.share_reached(owner) {
                return Err(Error::TooManyTasks {
                    scope: TaskLimit::IdentityStored,
                    limit,
                });
            }
        }
        let place = match identity.is_authenticated() && self.per_identity > 0 {
            true => {
                let principal = Arc::<str>::from(identity.principal());
                if !crate::take_place(&self.by_identity, principal.clone(), self.per_identity) {
                    return Err(Error::TooManyTasks {
                        scope: TaskLimit::Identity,
                        limit: self.per_identity as u64,
                    });
                }
                Some(IdentityPlace {
                    counts: self.by_identity.clone(),
                    principal,
                })
            }
            false => None,
        };
        // A refusal here drops `place`, giving it back.
        let running = self.slots.clone().try_acquire_owned().map_err(|_| busy())?;
        Ok(TaskSlot {
            _running: running,
            _identity: place,
        })
    }

    /// The limit of its share of the store (by count, else by bytes) that the records of
    /// `owner` reach, if they reach one.
    fn share_reached(&self, owner: &str) -> Option<u64> {
        let (count, bytes) = self.stored_per_identity;
        let share = *self.stored_by_owner.get(owner)?;
        if count > 0 && share.count >= count {
            Some(count as u64)
        } else {
            (bytes > 0 && share.bytes >= bytes).then_some(bytes)
        }
    }

    /// -32008 for bytes of task records over `tasks.max_stored_bytes`.
    fn too_heavy(&self) -> Error {
        Error::TooManyTasks {
            scope: TaskLimit::Bytes,
            limit: self.settings.max_stored_bytes,
        }
    }

    /// [`keep`](Self::keep)s `record`, counted by the length of its JSON, which is made
    /// (and returned) only when it is to be written to Redis (`for_redis`): the record is
    /// walked once either way.
    fn keep_json(
        &self,
        record: &TaskRecord,
        for_redis: bool,
    ) -> (Option<String>, Result<(), Error>) {
        let json = for_redis
            .then(|| serde_json::to_string(record).ok())
            .flatten();
        let bytes = json
            .as_ref()
            .map_or_else(|| json_len(record), |j| j.len() as u64);
        (json, self.keep(record, bytes))
    }

    /// Keeps `record`, which takes `bytes` as JSON, in place of its last one. Refused (and
    /// not kept) when it carries a result or questions (`inputRequests`, which may hold what
    /// the client sent) that would take the records past `tasks.max_stored_bytes`, or an
    /// authenticated owner's records past `tasks.max_stored_bytes_per_identity` (anonymous
    /// clients have no share). A record with neither is always kept: the records of running
    /// and failed tasks are small, and as many as `tasks.max_stored` allows.
    ///
    /// Two records of one owner growing at once may each see the share before the other's
    /// growth: the share can be passed by what one owner's tasks keep at the same instant.
    fn keep(&self, record: &TaskRecord, bytes: u64) -> Result<(), Error> {
        let bounded = record.result.is_some() || !record.input_requests.is_empty();
        let limit = self.settings.max_stored_bytes;
        // Past the bound alone: refused before the copy below (of a result that large).
        if bounded && bytes > limit {
            return Err(self.too_heavy());
        }
        let stored = &self.stored_bytes;
        // Copied before the entry's shard is locked: a result may be large.
        let copy = record.clone();
        let entry = self.records.entry(record.id.clone());
        let old = match &entry {
            Entry::Occupied(kept) => kept.get().bytes,
            Entry::Vacant(_) => 0,
        };
        let grown = bytes.saturating_sub(old);
        let refused = if grown == 0 || !bounded {
            None
        } else if let Some(limit) = self.share_passed(&record.owner, old, bytes) {
            Some(Error::TooManyTasks {
                scope: TaskLimit::IdentityStored,
                limit,
            })
        } else {
            stored
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    n.checked_add(grown).filter(|total| *total <= limit)
                })
                .err()
                .map(|_| self.too_heavy())
        };
        let fits = refused.is_none();
        if fits {
            if !bounded {
                stored.fetch_add(grown, Ordering::AcqRel);
            }
            stored.fetch_sub(old.saturating_sub(bytes), Ordering::AcqRel);
            let mut share = self
                .stored_by_owner
                .entry(record.owner.clone())
                .or_default();
            share.count += usize::from(matches!(entry, Entry::Vacant(_)));
            // `old`, this record's last bytes, is within the owner's.
            share.bytes = share.bytes.saturating_sub(old) + bytes;
            drop(share);
            entry.insert(Kept {
                record: copy,
                bytes,
            });
        } else {
            // Unlocked before `report` reads every shard.
            drop(entry);
        }
        // After the insert: a sweep that began meanwhile (and reset it) still learns of it.
        self.next_expiry
            .fetch_min(record.expires_ms(), Ordering::AcqRel);
        self.report();
        refused.map_or(Ok(()), Err)
    }

    /// The byte share of its identity that `owner`'s records would pass with one of them
    /// grown from `old` to `bytes`, if they would (an authenticated owner's, and a share
    /// set).
    fn share_passed(&self, owner: &str, old: u64, bytes: u64) -> Option<u64> {
        let (_, share) = self.stored_per_identity;
        // An anonymous client's principal is its proof's name alone (`Identity::anonymous`);
        // every authenticated one is `<proof>:<subject>`.
        if share == 0 || owner == Proof::Anonymous.as_str() {
            return None;
        }
        let kept = self.stored_by_owner.get(owner).map_or(0, |s| s.bytes);
        (kept.saturating_sub(old).saturating_add(bytes) > share).then_some(share)
    }

    /// Forgets the records whose task expired. While none has, this reads a clock and one
    /// number; otherwise one pass over the records (no JSON, no await: a few microseconds
    /// per thousand records).
    pub fn sweep(&self) {
        let now = unix_ms();
        if self.next_expiry.load(Ordering::Acquire) > now {
            return;
        }
        // Reset before the pass: a record kept during it lowers it again (see `keep`).
        self.next_expiry.store(u64::MAX, Ordering::Release);
        let mut next = u64::MAX;
        let mut forgot = false;
        self.records.retain(|_, kept| {
            let expires = kept.record.expires_ms();
            if expires > now {
                next = next.min(expires);
                return true;
            }
            self.stored_bytes.fetch_sub(kept.bytes, Ordering::AcqRel);
            self.stored_by_owner
                .remove_if_mut(&kept.record.owner, |_, share| {
                    share.count = share.count.saturating_sub(1);
                    share.bytes = share.bytes.saturating_sub(kept.bytes);
                    share.count == 0
                });
            forgot = true;
            false
        });
        self.next_expiry.fetch_min(next, Ordering::AcqRel);
        if forgot {
            // Ids of forgotten records waiting for Redis would pile up while it is away.
            let mut unsaved = crate::lock(&self.unsaved);
            if !unsaved.is_empty() {
                unsaved.retain(|id| self.records.contains_key(id));
            }
        }
        self.report();
    }

    /// Shows the store's size in `/metrics`.
    fn report(&self) {
        self.metrics.tasks_stored.set(self.records.len() as u64);
        self.metrics
            .tasks_stored_bytes
            .set(self.stored_bytes.load(Ordering::Acquire));
    }

    /// Tells every task running on this node that the server's shutdown grace ran out:
    /// each fails (-32004), stored as failed.
    pub fn shutdown(&self) {
        self.stopping.send_replace(true);
    }

    /// Watches for [`shutdown`](Self::shutdown) (a runner's).
    pub(super) fn stopping(&self) -> tokio::sync::watch::Receiver<bool> {
        self.stopping.subscribe()
    }

    /// Delivers what another node received for a task (the client's `responses`, or its
    /// cancel) to the task, if it runs here. That node acknowledged it already: a signal
    /// that finds the runner's queue full waits its turn in a task of its own, at most
    /// [`REMOTE_SIGNALS_WAITING`] at once, answers for [`APPLY_WAIT`] (as long as a local
    /// `tasks/update` would), a cancel until the runner takes it or ends (a cancel is not
    /// dropped for a busy runner); past either bound it is dropped, logged.
    pub fn steer_from_remote(&self, id: &str, cancel: bool, responses: Option<Map<String, Value>>) {
        let signal = remote_signal(cancel, responses);
        if let Delivery::Full(signal, runner) = self.signal_local(id, signal) {
            self.wait_for_room(id, signal, runner);
        }
    }

    /// A signal another node took, its runner's queue full: waits its turn in a task of its
    /// own (see [`steer_from_remote`](Self::steer_from_remote) for the bounds).
    fn wait_for_room(&self, id: &str, signal: Signal, runner: mpsc::Sender<Signal>) {
        let Ok(waiting) = self.remote_waiting.clone().try_acquire_owned() else {
            tracing::warn!(task = %id, "dropped a signal another node took for a task: its runner's queue is full, and {REMOTE_SIGNALS_WAITING} signals wait already");
            return;
        };
        let id = id.to_owned();
        let wait = match signal {
            Signal::Cancel { .. } => Duration::MAX,
            _ => APPLY_WAIT,
        };
        tokio::spawn(async move {
            let _waiting = waiting;
            let until = tokio::time::Instant::now().checked_add(wait);
            if !send_until(&runner, signal, until).await {
                tracing::warn!(task = %id, "dropped answers another node took for a task: its runner took none for {} ms", APPLY_WAIT.as_millis());
            }
        });
    }

    /// A steer kept in Redis, read again for a task running here (its node's bus was
    /// down): delivered as [`steer_from_remote`](Self::steer_from_remote) delivers. Answers
    /// that find the runner's queue full are waited for here, [`APPLY_WAIT`] at most,
    /// rather than in a task of their own holding one of the [`REMOTE_SIGNALS_WAITING`]
    /// places; a cancel waits as any remote cancel does, until the runner takes it or ends
    /// (dropped after the answers' wait, the cancel lost while the bus was down, which the
    /// replay is for, was lost again behind a busy runner).
    pub(crate) async fn replay_steer(
        &self,
        id: &str,
        cancel: bool,
        responses: Option<Map<String, Value>>,
    ) {
        let signal = remote_signal(cancel, responses);
        let Delivery::Full(signal, runner) = self.signal_local(id, signal) else {
            return;
        };
        if matches!(signal, Signal::Cancel { .. }) {
            self.wait_for_room(id, signal, runner);
            return;
        }
        let until = tokio::time::Instant::now() + APPLY_WAIT;
        if !send_until(&runner, signal, Some(until)).await {
            tracing::warn!(task = %id, "dropped a steer read again from Redis: its runner took none for {} ms", APPLY_WAIT.as_millis());
        }
    }

    /// The records of `ids` this node keeps, those not expired.
    fn live_records(&self, ids: &[String]) -> Vec<TaskRecord> {
        let now = unix_ms();
        ids.iter()
            .filter_map(|id| self.live_record(id, now))
            .collect()
    }

    /// The record of `id` this node keeps, if it has not expired by `now` (Unix ms).
    fn live_record(&self, id: &str, now: u64) -> Option<TaskRecord> {
        self.records
            .get(id)
            .map(|r| r.value().record.clone())
            .filter(|r| r.expires_ms() > now)
    }

    /// The ids of the tasks running on this node.
    pub(crate) fn running_ids(&self) -> Vec<String> {
        self.running
            .iter()
            .map(|entry| entry.key().clone())
            .collect()
    }

    /// Delivers a signal to a task running on this node, if one runs here. A signal that
    /// finds the queue full is handed back with the runner ([`Delivery::Full`]), for the
    /// caller to wait for room within its bound ([`send_until`]) or say why not.
    pub(crate) fn signal_local(&self, id: &str, signal: Signal) -> Delivery {
        let Some(runner) = self.running.get(id).map(|r| r.value().clone()) else {
            return Delivery::NotHere;
        };
        match runner.try_send(signal) {
            Ok(()) => Delivery::Queued,
            Err(mpsc::error::TrySendError::Full(signal)) => Delivery::Full(signal, runner),
            // The runner ended: the task is finished, or runs on no node any more.
            Err(mpsc::error::TrySendError::Closed(_)) => Delivery::NotHere,
        }
    }
}

/// Sends `signal` to `runner` once its queue has room, until `until` (`None`: for as long as
/// the runner runs); whether it was taken, or the runner ended (nothing is left to steer).
async fn send_until(
    runner: &mpsc::Sender<Signal>,
    signal: Signal,
    until: Option<tokio::time::Instant>,
) -> bool {
    match until {
        Some(until) => tokio::time::timeout_at(until, runner.send(signal))
            .await
            .is_ok(),
        None => {
            let _ = runner.send(signal).await;
            true
        }
    }
}

/// The signal of a steer another node took: a cancel, or answers.
fn remote_signal(cancel: bool, responses: Option<Map<String, Value>>) -> Signal {
    match responses {
        Some(responses) if !cancel => Signal::Answer {
            responses,
            applied: None,
        },
        _ => Signal::Cancel { applied: None },
    }
}

/// Where [`Tasks::signal_local`] put a signal.
#[derive(Debug)]
pub(crate) enum Delivery {
    /// In the queue of the task's runner (or, a cancel, on its way there).
    Queued,
    /// No runner of the task on this node.
    NotHere,
    /// The runner's queue is full: the signal, not sent, and the runner to wait for.
    Full(Signal, mpsc::Sender<Signal>),
}

/// A task's place among the tasks running on this node, and among its identity's; its
/// runner holds it, and dropping it gives both back.
pub(crate) struct TaskSlot {
    _running: OwnedSemaphorePermit,
    _identity: Option<IdentityPlace>,
}

/// One task counted for its identity in `Tasks::by_identity`, until dropped.
struct IdentityPlace {
    counts: Arc<DashMap<Arc<str>, usize>>,
    principal: Arc<str>,
}

impl Drop for IdentityPlace {
    fn drop(&mut self) {
        // Forgotten at zero, so the map holds only identities running tasks.
        crate::give_back_place(&self.counts, &self.principal);
    }
}

/// Stores `record` (this node's memory; Redis when configured) and publishes its status.
/// A result or questions that do not fit in `tasks.max_stored_bytes` are not kept: the task
/// fails with -32008 `taskBytes` instead, and `record` says so.
pub(crate) async fn save(cluster: &Cluster, record: &mut TaskRecord) {
    let redis = cluster.store.redis();
    let mut drop_steers = false;
    let (mut json, kept) = cluster.tasks.keep_json(record, redis.is_some());
    if let Err(refused) = kept {
        // Failing it rather than keeping the result past the bound: the client learns at
        // once why, instead of the node holding more than it was given; and refusing the
        // next tasks (as `reserve` does once the bound is reached) is what tells clients to
        // come back later, before any work is done.
        runner::fail(record, &refused);
        // Failed, it carries neither result nor questions: always kept.
        json = cluster.tasks.keep_json(record, redis.is_some()).0;
    }
    if let Some(redis) = redis {
        if let Some(json) = json {
            let ttl = record.remaining();
            // Written unless another node showed the task failed since its runner's last
            // claim (a failed record may always be: it says what that node's does).
            let mut put = if record.status == TaskStatus::Failed {
                redis
                    .put_task(&cluster.metrics, &record.id, json, ttl)
                    .await
                    .then_some(true)
            } else {
                redis
                    .put_task_unless_lost(&cluster.metrics, &record.id, json, ttl)
                    .await
            };
            if put == Some(false) {
                // Failed here too, never what it came to; the runner, finding its record
                // failed, stops. Written as that node wrote it, in case its write was lost.
                lose(record);
                if let (Some(json), _) = cluster.tasks.keep_json(record, true) {
                    put = redis
                        .put_task(&cluster.metrics, &record.id, json, ttl)
                        .await
                        .then_some(true);
                }
            }
            {
                let mut unsaved = crate::lock(&cluster.tasks.unsaved);
                if put.is_some() {
                    unsaved.remove(&record.id);
                } else {
                    unsaved.insert(record.id.clone());
                }
            }
            drop_steers = put.is_some() && record.status.is_terminal();
        }
    }
    publish(cluster, record);
    if let (true, Some(redis)) = (drop_steers, redis) {
        // What was kept to steer it steers nothing now. After the end is told: best effort,
        // it holds nothing up.
        redis.drop_task_steers(&cluster.metrics, &record.id).await;
    }
}

/// Stores the first record of a task that runs on (its runner's first store), as [`save`]
/// does; but with `cluster.on_store_error = "refuse"`, a record Redis does not take is
/// neither kept nor told: the task is refused, -32008 `taskStore`, before its tool goes on.
/// The rule keyed calls follow: nothing runs on one node unseen by the others (attack run
/// 52b, F1: such a task was "unknown" (-32602, final) on every other node, for as long as
/// its node could not write to Redis). With `"local"` it is kept and runs, its record
/// written once Redis takes it (best effort, as documented).
///
/// # Errors
/// [`Error::TaskStoreUnavailable`] when refused.
pub(super) async fn create(cluster: &Cluster, record: &mut TaskRecord) -> Result<(), Error> {
    let Some(redis) = cluster
        .store
        .redis()
        .filter(|_| cluster.store.refuses_without_redis())
    else {
        save(cluster, record).await;
        return Ok(());
    };
    let Ok(json) = serde_json::to_string(record) else {
        return Err(Error::Internal);
    };
    let bytes = json.len() as u64;
    // Written before it is kept or told: refused, it never was, on any node.
    if !redis
        .put_task(&cluster.metrics, &record.id, json, record.remaining())
        .await
    {
        return Err(store_unavailable(redis.paused_for()));
    }
    // A task just made (working) carries neither result nor questions: always kept.
    let _ = cluster.tasks.keep(record, bytes);
    publish(cluster, record);
    Ok(())
}

/// -32008 `taskStore`, to be retried after `retry_after`.
pub(super) fn store_unavailable(retry_after: Duration) -> Error {
    Error::TaskStoreUnavailable {
        retry_after_ms: u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX),
    }
}

/// Publishes the task's status on the change bus, for the listen streams that follow it
/// (on every node, through the bridge).
fn publish(cluster: &Cluster, record: &TaskRecord) {
    cluster
        .bus
        .publish(crate::registry::bus::BusEvent::Task(Arc::new(note_of(
            record,
        ))));
}

/// What the listen streams following the task hear of `record`.
pub(crate) fn note_of(record: &TaskRecord) -> crate::mailbox::inbox::TaskNote {
    crate::mailbox::inbox::TaskNote {
        id: record.id.clone(),
        owner: record.owner.clone(),
        tool: record.tool.clone(),
        fields: Value::Object(record.fields(true)).to_string(),
        status: Some(record.status.as_str().into()),
    }
}

/// The record of task `id` as stored: this node's copy of a task created here, else the one
/// in Redis; `None` when neither holds it, or Redis could not be asked. For whoever shows it
/// to check its owner and tool (a listen stream's `tasks_changed` does).
pub(crate) async fn reread(cluster: &Cluster, id: &str) -> Option<TaskRecord> {
    let now = unix_ms();
    let record = match cluster.tasks.live_record(id, now) {
        Some(record) => record,
        None => {
            let json = cluster
                .store
                .redis()?
                .get_task(&cluster.metrics, id)
                .await??;
            serde_json::from_str::<TaskRecord>(&json).ok()?
        }
    };
    (record.expires_ms() > now).then_some(record)
}

/// How often expired records are forgotten, and the records Redis did not take are tried
/// again.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Starts the store's upkeep: every [`SWEEP_EVERY`], forgets the records whose task expired
/// (they held their results until then), and with Redis writes again the task records it
/// did not take, once it answers. Called once, inside the server's runtime.
pub(crate) fn keep_tidy(cluster: &Arc<Cluster>) {
    let cluster = Arc::downgrade(cluster);
    actix_rt::spawn(async move {
        let mut every = tokio::time::interval(SWEEP_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let Some(cluster) = cluster.upgrade() else {
                return;
            };
            cluster.tasks.sweep();
            // While Redis is skipped (an outage), a try would be refused at once: the
            // records wait, untouched, until it answers again (or are pushed at the failed
            // beats, over a slow link: `push_unsaved`).
            let answering = cluster.store.redis().is_some_and(|r| r.is_available());
            if answering && cluster.tasks.has_unsaved() {
                write_back(&cluster).await;
            } else if !cluster.tasks.has_unsaved() {
                // Written back by the pushes of failed beats: the rewrite is over, and a
                // later pass for other records is no rewrite (review 59).
                cluster.tasks.rewriting.store(false, Ordering::Release);
            }
        }
    });
}

/// Task records written to Redis together in a [`write_back`] pass: one batch's claims sent
/// at once on the connection, then its records, two round trips for all (one awaited write
/// per record took longer than [`REWRITE_WAIT`](crate::cluster::REWRITE_WAIT) for a few
/// thousand records after Redis restarted empty, and the other nodes answered "unknown
/// task" for those not written yet: attack run 52b, F2).
const WRITE_BACK_BATCH: usize = 256;

/// Writes to Redis the task records it did not take, so that the other nodes show what
/// this node knows, a batch at a time ([`WRITE_BACK_BATCH`]), each claimed first; stops at
/// the first batch Redis does not answer in full. After Redis lost what it held, the node
/// says in Redis that it rewrites until a pass has written them all (`cluster::rewrite`).
/// Each record written is published too, as [`save`] publishes it: a listen stream that
/// missed its last status (the bus was down) hears it now.
async fn write_back(cluster: &Cluster) {
    let Some(redis) = cluster.store.redis() else {
        return;
    };
    loop {
        let ids = crate::lock(&cluster.tasks.unsaved).take(WRITE_BACK_BATCH);
        if ids.is_empty() {
            break;
        }
        if !write_batch(cluster, redis, ids).await {
            return;
        }
    }
    // The word in Redis is left to lapse, not deleted: another node may still be
    // rewriting under it.
    cluster.tasks.rewriting.store(false, Ordering::Release);
}

/// Writes one batch of [`write_back`]: whether Redis answered for every record (those it
/// did not answer for wait again, with the rest of the pass; those that changed meanwhile
/// are written again).
async fn write_batch(
    cluster: &Cluster,
    redis: &crate::cluster::store::RedisStore,
    ids: Vec<String>,
) -> bool {
    let records = cluster.tasks.live_records(&ids);
    let writes = records.into_iter().map(|mut record| async move {
        // Claimed first, whether or not the node stalled (this runs only after Redis was
        // out of reach, rarely): a record this node kept while cut off, the others finding
        // it dead, may be of a task another node showed failed meanwhile (see [`end`]).
        let Some(held) = redis
            .claim_task_held(&cluster.metrics, &record.id, crate::cluster::HOLD_LEASE)
            .await
        else {
            return (record.id, None);
        };
        let json = if held {
            serde_json::to_string(&record).ok()
        } else {
            // Lost: failed here too, never what it came to (its runner, if it still runs,
            // finds it so at its next claim and stops).
            lose(&mut record);
            cluster.tasks.keep_json(&record, true).0
        };
        let Some(json) = json else {
            return (record.id, Some(true));
        };
        if !redis
            .put_task(&cluster.metrics, &record.id, json, record.remaining())
            .await
        {
            return (record.id, None);
        }
        publish(cluster, &record);
        // A newer record saved meanwhile may have landed before this older one: written
        // again at the next round.
        let newer = cluster
            .tasks
            .records
            .get(&record.id)
            .is_some_and(|r| r.value().record != record);
        (record.id, Some(!newer))
    });
    let written = futures_util::future::join_all(writes).await;
    let mut unsaved = crate::lock(&cluster.tasks.unsaved);
    let mut answered = true;
    for (id, saved) in written {
        if saved != Some(true) {
            unsaved.insert(id);
        }
        answered &= saved.is_some();
    }
    answered
}

/// Task records sent at most in one [`push_unsaved`] pass.
const PUSH_PER_PASS: usize = 64;

/// Sends the task records Redis did not take, at a beat Redis did not answer in time, even
/// while the node skips Redis: over a slow link (commands reach Redis, its replies come
/// late) every beat fails, the node never finds Redis answering, and its records were
/// never written; the other nodes showed its tasks working after they ended, or unknown
/// (attack run 52b, F1). As the dedup results are pushed (`Store::push_stranded`): off the
/// beat's task, one pass at a time, [`PUSH_PER_PASS`] records at most, from the front of
/// the queue, those Redis did not answer in time put back at its end (none starved); a
/// record stays unsaved until a reply comes in time. Never written over a finished record
/// Redis holds (`RedisStore::put_task_now`): that one is left to [`write_back`]'s claim.
async fn push_unsaved(cluster: &Cluster) {
    let Some(redis) = cluster.store.redis() else {
        return;
    };
    let ids = crate::lock(&cluster.tasks.unsaved).take(PUSH_PER_PASS);
    let records = cluster.tasks.live_records(&ids);
    let pushes = records.iter().map(|record| async move {
        let json = serde_json::to_string(record).ok()?;
        redis
            .put_task_now(&cluster.metrics, &record.id, json, record.remaining())
            .await
    });
    let pushed = futures_util::future::join_all(pushes).await;
    let mut unsaved = crate::lock(&cluster.tasks.unsaved);
    for (record, pushed) in records.into_iter().zip(pushed) {
        let newer = cluster
            .tasks
            .records
            .get(&record.id)
            .is_some_and(|r| r.value().record != record);
        if pushed != Some(true) || newer {
            unsaved.insert(record.id);
        }
    }
}

/// What a caller's policy says of a task's tool: `Ok` when it may use it, else the error a
/// `tools/call` of that tool gets (`Access::check_tool`, in the session layer above).
pub(crate) type ToolCheck<'a> = &'a dyn Fn(&str) -> Result<(), Error>;

/// The task `id` as `owner` may see it: this node's copy of a task created here, else the
/// one in Redis. An id that is not a UUID is no task, and is never looked up.
///
/// # Errors
/// -32602 for no task of `owner` (never created, expired, another identity's), and the
/// same for a task of a tool `check_tool` refuses: the caller learns nothing of it.
pub(crate) async fn load(
    cluster: &Cluster,
    id: &str,
    owner: &str,
    check_tool: ToolCheck<'_>,
) -> Result<TaskRecord, Error> {
    let unknown = || Error::UnknownTask {
        task_id: id.chars().take(64).collect(),
    };
    if !is_task_id(id) {
        return Err(unknown());
    }
    let now = unix_ms();
    let record = match cluster.tasks.live_record(id, now) {
        Some(record) => Some(record),
        None => match cluster.store.redis() {
            Some(redis) => match redis.get_task(&cluster.metrics, id).await {
                Some(Some(json)) => serde_json::from_str::<TaskRecord>(&json).ok(),
                // Redis may have lost it (restarted empty) a moment ago, its node about to
                // write it again: retryable, not "unknown task" (attack run 50c, F2).
                Some(None) => {
                    if cluster.absent_may_be_lost(redis).await {
                        return Err(store_unavailable(crate::cluster::REWRITE_WAIT / 3));
                    }
                    None
                }
                // Not known: told as such (retryable), never as a task that does not exist.
                None => return Err(store_unavailable(redis.retry_after())),
            },
            None => None,
        },
    };
    let record = record
        .filter(|r| r.owner == owner && r.expires_ms() > now)
        .ok_or_else(unknown)?;
    // Answered as for no such task: naming the tool would tell a credential that may not
    // see it that it exists.
    check_tool(&record.tool).map_err(|_| unknown())?;
    Ok(record)
}

/// The task as `tasks/get` shows it: as [`load`]ed, failed when its node is dead (see
/// [`fail_if_node_lost`]). `tasks/update` and `tasks/cancel` act on the task as stored (a
/// runner a beat late is not dead to them: its answers and cancels reach it, review 51 #1).
///
/// # Errors
/// As [`load`], and -32008 `taskStore` when its node is dead and Redis did not answer the
/// claim of its end.
pub(crate) async fn load_shown(
    cluster: &Cluster,
    id: &str,
    owner: &str,
    check_tool: ToolCheck<'_>,
) -> Result<TaskRecord, Error> {
    let mut record = load(cluster, id, owner, check_tool).await?;
    fail_if_node_lost(cluster, &mut record).await?;
    Ok(record)
}

/// A task not finished whose node is dead (no beat for 3 s: killed, stopped, or cut off):
/// failed, -32031 `nodeLost`, as the requests of a dead node are answered (it was shown
/// working until its time to live ran out, and a cancel answered success and changed
/// nothing: attack run 50c, F3). Final everywhere: the task's end is claimed `lost` in Redis
/// first, and the failed record written there, unless its node claimed it `held` since its
/// stall (it goes on: the record is shown as it is); its node, going on, finds it lost and
/// stops the task (see [`end`]). On the task's own node, a runner that has not claimed its
/// task since the node may have been taken for dead has its record shown failed when another
/// node claimed it lost.
///
/// # Errors
/// -32008 `taskStore` when Redis did not answer the claim: the task is shown neither failed
/// (its node may have claimed it) nor as its record says (it may be lost).
async fn fail_if_node_lost(cluster: &Cluster, record: &mut TaskRecord) -> Result<(), Error> {
    let node = record.node;
    if record.status.is_terminal() || node == 0 {
        return Ok(());
    }
    let Some(redis) = cluster.store.redis() else {
        return Ok(());
    };
    if node == cluster.node_number() {
        // A look at the beats, unless this node may have been taken for dead since its
        // runner's last claim.
        let due = cluster
            .tasks
            .holds
            .get(&record.id)
            .is_some_and(|hold| hold.due(cluster));
        if due && redis.task_lost(&cluster.metrics, &record.id).await == Some(true) {
            lose(record);
        }
        return Ok(());
    }
    if !cluster.found_dead(node).await {
        return Ok(());
    }
    match redis
        .claim_task_lost(&cluster.metrics, &record.id, record.remaining())
        .await
    {
        Some(true) => {
            lose(record);
            // Written, so that the other nodes show it failed too once its node is alive
            // again, before its runner stores it so (attack run 52, F3). Not kept here: this
            // node does not run it.
            if let Ok(json) = serde_json::to_string(record) {
                let _ = redis
                    .put_task(&cluster.metrics, &record.id, json, record.remaining())
                    .await;
            }
            Ok(())
        }
        Some(false) => Ok(()),
        None => Err(store_unavailable(redis.retry_after())),
    }
}

/// Fails `record` as a task another node showed failed because its node was dead.
pub(super) fn lose(record: &mut TaskRecord) {
    runner::fail(record, &Error::NodeLost);
    record.input_requests.clear();
}

/// `tasks/update`: gives the answers to the task's runner and waits (briefly) until they
/// are stored. Answers to a finished task, or to keys not outstanding, are ignored (here,
/// before they go anywhere: sent through Redis to another node, they are kept there, and
/// only answers to the task's questions are worth the room; review 58 #2); answers its
/// runner on this node has no room for within 2 s are refused (-32008 `task`), see
/// [`steer`].
pub(crate) async fn update(
    cluster: &Cluster,
    id: &str,
    owner: &str,
    check_tool: ToolCheck<'_>,
    mut responses: Map<String, Value>,
) -> Result<(), Error> {
    let record = load(cluster, id, owner, check_tool).await?;
    responses.retain(|key, _| record.input_requests.contains_key(key));
    if record.status.is_terminal() || responses.is_empty() {
        return Ok(());
    }
    steer(cluster, id, record.remaining(), |applied| Signal::Answer {
        responses: responses.clone(),
        applied,
    })
    .await
}

/// `tasks/cancel`: asks the task's runner to stop and waits (briefly) until the task is
/// stored as cancelled. Cancelling a finished task changes nothing.
pub(crate) async fn cancel(
    cluster: &Cluster,
    id: &str,
    owner: &str,
    check_tool: ToolCheck<'_>,
) -> Result<(), Error> {
    let record = load(cluster, id, owner, check_tool).await?;
    if record.status.is_terminal() {
        return Ok(());
    }
    steer(cluster, id, record.remaining(), |applied| Signal::Cancel {
        applied,
    })
    .await
}

/// Sends the signal `make` builds to the task's runner: on this node, waiting until it
/// applied it; on another node, through Redis (acknowledged once published: that node
/// delivers it as [`Tasks::steer_from_remote`] can), where it is kept for the task's time
/// left (`ttl`).
///
/// # Errors
/// [`Error::TaskStoreUnavailable`] when Redis did not take it, and [`Error::TaskBusy`] when
/// this node's runner had no room for it within [`APPLY_WAIT`] (the client sends it again:
/// answers and cancels are idempotent), rather than its being lost.
async fn steer(
    cluster: &Cluster,
    id: &str,
    ttl: Duration,
    make: impl Fn(Option<oneshot::Sender<()>>) -> Signal,
) -> Result<(), Error> {
    let (applied, done) = oneshot::channel();
    let deadline = tokio::time::Instant::now() + APPLY_WAIT;
    match cluster.tasks.signal_local(id, make(Some(applied))) {
        Delivery::Queued => {
            let _ = tokio::time::timeout_at(deadline, done).await;
            return Ok(());
        }
        // Signals sent faster than the runner takes them (several clients, a busy thread):
        // this one waits its turn, within the bound of the acknowledgement, and is refused
        // rather than acknowledged and dropped (or left waiting in a task of its own) when it
        // gets none: the client sends it again.
        Delivery::Full(signal, runner) => {
            if !send_until(&runner, signal, Some(deadline)).await {
                return Err(Error::TaskBusy {
                    waited_ms: APPLY_WAIT.as_millis() as u64,
                });
            }
            let _ = tokio::time::timeout_at(deadline, done).await;
            return Ok(());
        }
        Delivery::NotHere => {}
    }
    let (cancel, responses) = match make(None) {
        Signal::Answer { responses, .. } => (false, Some(responses)),
        Signal::Cancel { .. } => (true, None),
    };
    if crate::cluster::store::bridge::send_task_steer(cluster, id, ttl, cancel, responses).await {
        return Ok(());
    }
    let retry_after = cluster
        .store
        .redis()
        .map_or(Duration::ZERO, |redis| redis.retry_after());
    Err(store_unavailable(retry_after))
}

/// The length of `value`'s JSON, counted without keeping it.
pub(super) fn json_len(value: &impl Serialize) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len() as u64;
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// Unix time in ms.
pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// RFC 3339 (ISO 8601) UTC time of unix ms, e.g. `2026-12-01T05:14:26.123Z`.
fn rfc3339(ms: u64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".to_owned())
}

/// Whether `id` is in the form every task id has (a UUID, lowercase and hyphenated, as
/// [`TaskRecord::new`] makes them): another spelling names no task, since records are found
/// by their id's text. Checked without allocating: a listen may name a message of them.
pub(crate) fn is_task_id(id: &str) -> bool {
    let mut canonical = [0u8; uuid::fmt::Hyphenated::LENGTH];
    id.len() == canonical.len()
        && uuid::Uuid::try_parse(id)
            .is_ok_and(|uuid| uuid.hyphenated().encode_lower(&mut canonical) == id)
}

/// Whether a request's client capabilities declare the tasks extension.
pub(crate) fn declared(client_capabilities: &Value) -> bool {
    client_capabilities
        .get("extensions")
        .and_then(|e| e.get(crate::protocol::mcp::TASKS_EXTENSION))
        .is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_is_named_as_serde_names_it_and_the_inbox_ends_on_the_terminal_ones() {
        use TaskStatus::{Cancelled, Completed, Failed, InputRequired, Working};
        for status in [Working, InputRequired, Completed, Failed, Cancelled] {
            // A status added to the enum fails to compile here until it is listed above.
            match status {
                Working | InputRequired | Completed | Failed | Cancelled => {}
            }
            let serialized = serde_json::to_value(status).expect("a status serializes");
            assert_eq!(serialized, status.as_str(), "{status:?}");
            assert_eq!(
                crate::mailbox::inbox::is_final(status.as_str()),
                status.is_terminal(),
                "{status:?}"
            );
        }
    }

    /// Past the answers' [`APPLY_WAIT`], the runner reads the answer that filled its queue,
    /// then the cancel that waited for room.
    async fn reads_the_answer_then_the_cancel(signals: &mut mpsc::Receiver<Signal>) {
        tokio::time::sleep(APPLY_WAIT + Duration::from_millis(100)).await;
        assert!(matches!(signals.recv().await, Some(Signal::Answer { .. })));
        let cancel = tokio::time::timeout(Duration::from_secs(1), signals.recv()).await;
        assert!(
            matches!(cancel, Ok(Some(Signal::Cancel { .. }))),
            "{cancel:?}"
        );
    }

    /// A full queue hands any signal back; a cancel from another node (acknowledged there)
    /// then waits its turn for as long as the runner runs, not [`APPLY_WAIT`] alone.
    #[tokio::test]
    async fn a_cancel_from_another_node_is_not_lost_to_a_full_queue() {
        let tasks = Tasks::new(&TaskSettings::default(), Arc::default());
        let (runner, mut signals) = mpsc::channel(1);
        tasks.running.insert("t".into(), runner);
        let answer = || Signal::Answer {
            responses: Map::new(),
            applied: None,
        };
        assert!(matches!(
            tasks.signal_local("t", answer()),
            Delivery::Queued
        ));
        assert!(matches!(
            tasks.signal_local("t", Signal::Cancel { applied: None }),
            Delivery::Full(Signal::Cancel { .. }, _)
        ));
        tasks.steer_from_remote("t", true, None);
        reads_the_answer_then_the_cancel(&mut signals).await;
        assert!(matches!(
            tasks.signal_local("none", Signal::Cancel { applied: None }),
            Delivery::NotHere
        ));
    }

    /// A cancel read again from Redis (the bus was down) that finds the runner's queue full
    /// waits as any remote cancel does, past the answers' [`APPLY_WAIT`], and the replay
    /// goes on meanwhile. (It was dropped after 2 s: the cancel the replay is for lost
    /// again; review of stop 51.)
    #[tokio::test]
    async fn a_replayed_cancel_waits_for_a_full_queue_as_long_as_the_runner_runs() {
        let tasks = Tasks::new(&TaskSettings::default(), Arc::default());
        let (runner, mut signals) = mpsc::channel(1);
        tasks.running.insert("t".into(), runner);
        // The queue is full.
        let answer = Signal::Answer {
            responses: Map::new(),
            applied: None,
        };
        assert!(matches!(tasks.signal_local("t", answer), Delivery::Queued));
        // Returns at once: the cancel waits in a task of its own.
        tokio::time::timeout(
            Duration::from_millis(500),
            tasks.replay_steer("t", true, None),
        )
        .await
        .expect("the replay goes on");
        reads_the_answer_then_the_cancel(&mut signals).await;
    }

    /// Answers from other nodes that find a runner's queue full wait for room, at most
    /// [`REMOTE_SIGNALS_WAITING`] at once, and are delivered as it reads; the rest are
    /// dropped (they were acknowledged as Redis took them: unbounded, one client's pipelined
    /// updates each held a task and its answers here).
    #[tokio::test]
    async fn answers_from_other_nodes_wait_for_room_no_more_than_a_bound_at_once() {
        let tasks = Tasks::new(&TaskSettings::default(), Arc::default());
        let (runner, mut signals) = mpsc::channel(1);
        tasks.running.insert("t".into(), runner);
        let alive = || {
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
        };
        let before = alive();
        // The first fills the queue.
        for _ in 0..=REMOTE_SIGNALS_WAITING + 100 {
            tasks.steer_from_remote("t", false, Some(Map::new()));
        }
        assert_eq!(alive() - before, REMOTE_SIGNALS_WAITING);
        for _ in 0..=REMOTE_SIGNALS_WAITING {
            assert!(matches!(signals.recv().await, Some(Signal::Answer { .. })));
        }
        tokio::task::yield_now().await;
        assert!(signals.try_recv().is_err(), "the rest were dropped");
        assert_eq!(alive(), before);
    }

    /// An answer whose runner has no room for it within the acknowledgement's wait is
    /// refused, for the client to send again; with room made meanwhile, it is delivered
    /// and acknowledged. (It was acknowledged and dropped: the attack run lost 5 answers of
    /// 6 so, the task left waiting for them until it expired.)
    #[tokio::test]
    async fn an_answer_the_runner_has_no_room_for_is_refused_not_acknowledged_and_dropped() {
        let cluster = Cluster::new(
            Arc::new(crate::config::Settings::default()),
            Arc::default(),
            crate::registry::bus::ChangeBus::default(),
        );
        let (runner, mut signals) = mpsc::channel(1);
        cluster.tasks.running.insert("t".into(), runner);
        let answer = |applied| Signal::Answer {
            responses: Map::new(),
            applied,
        };
        // The queue is full, and nothing reads it.
        assert!(matches!(
            cluster.tasks.signal_local("t", answer(None)),
            Delivery::Queued
        ));
        let refused = steer(&cluster, "t", Duration::from_secs(60), answer).await;
        assert!(
            matches!(refused, Err(Error::TaskBusy { waited_ms: 2000 })),
            "{refused:?}"
        );
        // The runner reads while the next one waits: it is delivered, and applied.
        let runner_reads = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert!(matches!(signals.recv().await, Some(Signal::Answer { .. })));
            match signals.recv().await {
                Some(Signal::Answer {
                    applied: Some(applied),
                    ..
                }) => {
                    let _ = applied.send(());
                }
                other => panic!("{other:?}"),
            }
        };
        let (delivered, ()) = tokio::join!(
            steer(&cluster, "t", Duration::from_secs(60), answer),
            runner_reads
        );
        assert!(delivered.is_ok(), "{delivered:?}");
    }

    #[test]
    fn task_ids_are_the_form_records_are_made_with() {
        let id = TaskRecord::new("alice", "job", &TaskSettings::default()).id;
        assert!(is_task_id(&id));
        for other in [
            id.to_uppercase(),
            id.replace('-', ""),
            format!("{{{id}}}"),
            format!("urn:uuid:{id}"),
            "x".repeat(36),
            String::new(),
        ] {
            assert!(!is_task_id(&other), "{other}");
        }
    }

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_764_566_066_123), "2025-12-01T05:14:26.123Z");
    }

    #[test]
    fn fields_follow_the_status() {
        let settings = TaskSettings::default();
        let mut record = TaskRecord::new("alice", "job", &settings);
        let created = record.fields(true);
        assert_eq!(created["status"], "working");
        assert_eq!(created["ttlMs"], settings.ttl_ms);
        assert!(!created.contains_key("result") && !created.contains_key("inputRequests"));
        record
            .input_requests
            .insert("k".into(), json!({"method": "elicitation/create"}));
        record.set(TaskStatus::InputRequired);
        assert_eq!(
            record.fields(true)["inputRequests"]["k"]["method"],
            "elicitation/create"
        );
        assert!(!record.fields(false).contains_key("inputRequests"));
        record.result = Some(json!({"content": []}));
        record.set(TaskStatus::Completed);
        let done = record.fields(true);
        assert_eq!(done["result"], json!({"content": []}));
        assert!(!done.contains_key("inputRequests"));
        record.set(TaskStatus::Failed);
        assert_eq!(record.fields(true)["error"]["code"], -32603);
    }

    #[test]
    fn records_stored_before_the_tool_was_kept_still_read() {
        let mut record = TaskRecord::new("alice", "job", &TaskSettings::default());
        let mut stored = serde_json::to_value(&record).expect("encodes");
        stored.as_object_mut().expect("an object").remove("tool");
        record.tool = String::new();
        assert_eq!(
            serde_json::from_value::<TaskRecord>(stored).expect("decodes"),
            record
        );
    }

    #[test]
    fn records_survive_their_stored_form() {
        let mut record = TaskRecord::new("alice", "job", &TaskSettings::default());
        record.result = Some(json!({"content": [{"type": "text", "text": "é"}]}));
        record.set(TaskStatus::Completed);
        let json = serde_json::to_string(&record).expect("encodes");
        assert_eq!(
            serde_json::from_str::<TaskRecord>(&json).expect("decodes"),
            record
        );
    }

    #[test]
    fn kept_bytes_follow_the_records_and_the_sweep() {
        let tasks = Tasks::new(
            &TaskSettings {
                max_stored_bytes: 120,
                // The node's bound alone.
                max_stored_bytes_per_identity: Some(0),
                ..TaskSettings::default()
            },
            Arc::default(),
        );
        let bytes = || tasks.stored_bytes.load(Ordering::Acquire);
        let mut record = TaskRecord::new("alice", "job", &TaskSettings::default());
        assert!(tasks.keep(&record, 100).is_ok());
        assert!(
            tasks.keep(&record, 50).is_ok(),
            "a smaller record in its place"
        );
        assert_eq!(bytes(), 50);
        record.result = Some(json!({}));
        assert!(tasks.keep(&record, 200).is_err(), "a result past the bound");
        assert_eq!(bytes(), 50);
        assert!(tasks.keep(&record, 120).is_ok());
        assert_eq!(bytes(), 120);
        let mut other = TaskRecord::new("bob", "job", &TaskSettings::default());
        assert!(
            tasks.keep(&other, 30).is_ok(),
            "no result: kept past the bound"
        );
        assert_eq!(bytes(), 150);
        // Expired: the sweep forgets it, and only it.
        other.created_ms = 0;
        assert!(tasks.keep(&other, 30).is_ok());
        tasks.sweep();
        assert_eq!(tasks.records.len(), 1);
        assert_eq!(bytes(), 120);
        assert_eq!(tasks.metrics.tasks_stored_bytes.get(), 120);
    }

    /// Each owner's share follows its records, by count and bytes, through replacements
    /// and the sweep; an authenticated identity at its share is refused a new task (by
    /// bytes, then by count), others are not, and anonymous clients never by a share.
    #[test]
    fn each_identity_keeps_its_share_of_the_store() {
        let tasks = Tasks::new(
            &TaskSettings {
                max_stored_per_identity: Some(2),
                max_stored_bytes_per_identity: Some(100),
                ..TaskSettings::default()
            },
            Arc::default(),
        );
        let alice = Identity::authenticated("alice", vec![]);
        let bob = Identity::authenticated("bob", vec![]);
        let share = |owner: &str| tasks.stored_by_owner.get(owner).map(|s| (s.count, s.bytes));
        let settings = TaskSettings::default();
        let mut first = TaskRecord::new(alice.principal(), "job", &settings);
        assert!(tasks.keep(&first, 40).is_ok());
        assert!(tasks.keep(&first, 100).is_ok(), "its result, in its place");
        assert_eq!(share(alice.principal()), Some((1, 100)));
        let refused = |identity: &Identity| match tasks.reserve(identity) {
            Err(Error::TooManyTasks {
                scope: TaskLimit::IdentityStored,
                limit,
            }) => Some(limit),
            _ => None,
        };
        assert_eq!(refused(&alice), Some(100), "her bytes");
        assert_eq!(refused(&bob), None);
        assert!(tasks.keep(&first, 10).is_ok(), "smaller again");
        assert_eq!(refused(&alice), None);
        let second = TaskRecord::new(alice.principal(), "job", &settings);
        assert!(tasks.keep(&second, 10).is_ok());
        assert_eq!(share(alice.principal()), Some((2, 20)));
        assert_eq!(refused(&alice), Some(2), "her count");
        let anonymous = Identity::anonymous();
        for _ in 0..3 {
            let record = TaskRecord::new(anonymous.principal(), "job", &settings);
            assert!(tasks.keep(&record, 10).is_ok());
        }
        assert_eq!(refused(&anonymous), None, "anonymous clients have no share");
        // Expired: the sweep forgets it, and her share with it.
        first.created_ms = 0;
        assert!(tasks.keep(&first, 10).is_ok());
        tasks.sweep();
        assert_eq!(share(alice.principal()), Some((1, 10)));
        assert_eq!(refused(&alice), None);
    }

    /// A result or questions that would take an authenticated owner's records past its
    /// byte share are refused as they are kept; in place of its last record, what it held is
    /// not counted twice; anonymous clients have no share.
    #[test]
    fn a_result_or_questions_past_the_owners_share_are_refused() {
        let tasks = Tasks::new(
            &TaskSettings {
                max_stored_bytes_per_identity: Some(100),
                ..TaskSettings::default()
            },
            Arc::default(),
        );
        let settings = TaskSettings::default();
        let alice = Identity::authenticated("alice", vec![]);
        let mut first = TaskRecord::new(alice.principal(), "job", &settings);
        first.input_requests.insert("q".into(), json!({}));
        assert!(tasks.keep(&first, 60).is_ok());
        let mut second = TaskRecord::new(alice.principal(), "job", &settings);
        second.result = Some(json!({}));
        assert!(matches!(
            tasks.keep(&second, 50),
            Err(Error::TooManyTasks {
                scope: TaskLimit::IdentityStored,
                limit: 100
            })
        ));
        // Refused, it is not kept, nor counted.
        let share = tasks
            .stored_by_owner
            .get(alice.principal())
            .map(|s| (s.count, s.bytes));
        assert_eq!(share, Some((1, 60)));
        assert_eq!(tasks.stored_bytes.load(Ordering::Acquire), 60);
        assert!(!tasks.records.contains_key(&second.id));
        first.set(TaskStatus::Completed);
        first.result = Some(json!({}));
        assert!(tasks.keep(&first, 90).is_ok(), "in place of her first");
        let mut anonymous = TaskRecord::new(Identity::anonymous().principal(), "job", &settings);
        anonymous.result = Some(json!({}));
        assert!(tasks.keep(&anonymous, 500).is_ok());
    }

    #[test]
    fn reservations_are_bounded() {
        let tasks = Tasks::new(
            &TaskSettings {
                max_running: 1,
                ..TaskSettings::default()
            },
            Arc::default(),
        );
        let anonymous = Identity::anonymous();
        let first = tasks.reserve(&anonymous).expect("a slot");
        assert!(matches!(
            tasks.reserve(&anonymous),
            Err(Error::TooManyTasks { .. })
        ));
        drop(first);
        assert!(tasks.reserve(&anonymous).is_ok());
    }

    #[test]
    fn each_identity_runs_its_share() {
        let tasks = Tasks::new(
            &TaskSettings {
                max_running: 4,
                max_running_per_identity: Some(1),
                ..TaskSettings::default()
            },
            Arc::default(),
        );
        let (alice, bob) = (
            Identity::authenticated("alice", vec![]),
            Identity::authenticated("bob", vec![]),
        );
        let first = tasks.reserve(&alice).expect("alice's first");
        assert!(matches!(
            tasks.reserve(&alice),
            Err(Error::TooManyTasks {
                scope: TaskLimit::Identity,
                limit: 1
            })
        ));
        let _bob = tasks.reserve(&bob).expect("bob's");
        // Anonymous clients are not told apart: only `max_running` bounds them.
        let _a = tasks.reserve(&Identity::anonymous()).expect("anonymous");
        let _b = tasks.reserve(&Identity::anonymous()).expect("anonymous");
        assert!(matches!(
            tasks.reserve(&Identity::anonymous()),
            Err(Error::TooManyTasks {
                scope: TaskLimit::Node,
                ..
            })
        ));
        drop(first);
        assert!(
            !tasks.by_identity.contains_key(alice.principal()),
            "forgotten at zero"
        );
        assert!(tasks.reserve(&alice).is_ok(), "her place came back");
    }
}
