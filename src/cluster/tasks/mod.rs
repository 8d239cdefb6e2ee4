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
//! exist. Task ids are random UUIDs (122 random bits), never guessable.

pub(crate) mod runner;

use crate::cluster::Cluster;
use crate::config::TaskSettings;
use crate::protocol::mcp::Error;
use dashmap::DashMap;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

/// Signals a runner may hold before it reads them (one client steering one task).
const SIGNAL_CAPACITY: usize = 16;
/// The longest a `tasks/update` or `tasks/cancel` waits for the task's runner (on this
/// node) to have applied it; past that it is acknowledged anyway (the extension's
/// acknowledgements are eventually consistent).
const APPLY_WAIT: Duration = Duration::from_secs(2);

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
}

/// A task as stored, and (through [`TaskRecord::fields`]) as shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TaskRecord {
    pub id: String,
    /// The subject of the identity that created it.
    pub owner: String,
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
}

impl TaskRecord {
    /// A task just created, working, for `owner`.
    pub fn new(owner: &str, settings: &TaskSettings) -> Self {
        let now = unix_ms();
        Self {
            id: uuid::Uuid::new_v4().to_string(),
            owner: owner.to_owned(),
            status: TaskStatus::Working,
            status_message: None,
            created_ms: now,
            updated_ms: now,
            ttl_ms: settings.ttl_ms,
            poll_interval_ms: settings.poll_interval_ms,
            input_requests: Map::new(),
            result: None,
            error: None,
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
    /// The server is shutting down: the task fails.
    Shutdown,
}

/// The tasks of this node. See the module docs.
pub(crate) struct Tasks {
    settings: TaskSettings,
    /// Tasks created on this node (running or done), until they expire.
    records: DashMap<String, TaskRecord>,
    /// Tasks running on this node: how to reach their runner.
    running: DashMap<String, mpsc::Sender<Signal>>,
    /// One permit per task running on this node.
    slots: Arc<Semaphore>,
    /// Tasks of `records` whose last record Redis did not take (it was paused or away):
    /// written again once it answers ([`write_back`]), or the other nodes would show a
    /// finished task as working until it expires. Within `records`, so bounded as it is.
    unsaved: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl Tasks {
    pub fn new(settings: &TaskSettings) -> Self {
        Self {
            settings: settings.clone(),
            records: DashMap::new(),
            running: DashMap::new(),
            slots: Arc::new(Semaphore::new(settings.max_running)),
            unsaved: std::sync::Mutex::default(),
        }
    }

    /// Whether task records wait to be written to Redis.
    pub(crate) fn has_unsaved(&self) -> bool {
        !crate::lock(&self.unsaved).is_empty()
    }

    /// Room for one more task, or -32008: a running slot, and room in the store (after
    /// forgetting expired tasks, if it looked full).
    pub fn reserve(&self) -> Result<OwnedSemaphorePermit, Error> {
        let busy = || Error::TooManyTasks {
            limit: self.settings.max_running.min(self.settings.max_stored),
        };
        if self.records.len() >= self.settings.max_stored {
            let now = unix_ms();
            self.records.retain(|_, r| r.expires_ms() > now);
            if self.records.len() >= self.settings.max_stored {
                return Err(busy());
            }
        }
        self.slots.clone().try_acquire_owned().map_err(|_| busy())
    }

    /// Tells every task running on this node that the server is shutting down.
    pub fn shutdown(&self) {
        for runner in self.running.iter() {
            // A full queue means the runner is busy with the client's signals; it will see
            // the shutdown of its node when the server stops it.
            let _ = runner.value().try_send(Signal::Shutdown);
        }
    }

    /// Delivers what another node received for a task (the client's `responses`, or its
    /// cancel) to the task, if it runs here.
    pub fn steer_from_remote(&self, id: &str, cancel: bool, responses: Option<Map<String, Value>>) {
        let signal = match responses {
            Some(responses) if !cancel => Signal::Answer {
                responses,
                applied: None,
            },
            _ => Signal::Cancel { applied: None },
        };
        self.signal_local(id, signal);
    }

    /// Delivers a signal to a task running on this node; false when none runs here (or
    /// its queue is full of the client's answers: those are dropped, not waited for).
    pub fn signal_local(&self, id: &str, signal: Signal) -> bool {
        let Some(runner) = self.running.get(id).map(|r| r.value().clone()) else {
            return false;
        };
        match runner.try_send(signal) {
            Ok(()) => true,
            // A cancel is never lost to a queue its client filled with answers (each waits
            // for its store): it takes its turn after them. Waiting is bounded by the
            // runner: its end closes the queue.
            Err(mpsc::error::TrySendError::Full(cancel @ Signal::Cancel { .. })) => {
                tokio::spawn(async move {
                    let _ = runner.send(cancel).await;
                });
                true
            }
            Err(_) => false,
        }
    }
}

/// Stores `record` (this node's memory; Redis when configured) and publishes its status.
pub(crate) async fn save(cluster: &Cluster, record: &TaskRecord) {
    cluster
        .tasks
        .records
        .insert(record.id.clone(), record.clone());
    if let Some(redis) = cluster.store.redis() {
        if let Ok(json) = serde_json::to_string(record) {
            let saved = redis
                .put_task(&cluster.metrics, &record.id, json, record.remaining())
                .await;
            let mut unsaved = crate::lock(&cluster.tasks.unsaved);
            if saved {
                unsaved.remove(&record.id);
            } else {
                unsaved.insert(record.id.clone());
            }
        }
    }
    cluster
        .bus
        .publish(crate::registry::bus::BusEvent::Task(Arc::new(
            crate::mailbox::inbox::TaskNote {
                id: record.id.clone(),
                owner: record.owner.clone(),
                fields: Value::Object(record.fields(true)).to_string(),
            },
        )));
}

/// How often the records Redis did not take are tried again.
const WRITE_BACK_EVERY: Duration = Duration::from_secs(1);

/// Starts writing again, every [`WRITE_BACK_EVERY`], the task records Redis did not take,
/// once it answers. Called once with Redis configured, inside the server's runtime.
pub(crate) fn keep_saved(cluster: &Arc<Cluster>) {
    if cluster.store.redis().is_none() {
        return;
    }
    let cluster = Arc::downgrade(cluster);
    actix_rt::spawn(async move {
        let mut every = tokio::time::interval(WRITE_BACK_EVERY);
        loop {
            every.tick().await;
            let Some(cluster) = cluster.upgrade() else {
                return;
            };
            if cluster.tasks.has_unsaved() {
                write_back(&cluster).await;
            }
        }
    });
}

/// Writes to Redis the task records it did not take, so that the other nodes show what
/// this node knows; stops at the first it refuses.
async fn write_back(cluster: &Cluster) {
    let Some(redis) = cluster.store.redis() else {
        return;
    };
    let ids: Vec<String> = crate::lock(&cluster.tasks.unsaved).drain().collect();
    let now = unix_ms();
    let mut ids = ids.into_iter();
    while let Some(id) = ids.next() {
        let Some(record) = cluster
            .tasks
            .records
            .get(&id)
            .map(|r| r.value().clone())
            .filter(|r| r.expires_ms() > now)
        else {
            continue;
        };
        let Ok(json) = serde_json::to_string(&record) else {
            continue;
        };
        if !redis
            .put_task(&cluster.metrics, &id, json.clone(), record.remaining())
            .await
        {
            let mut unsaved = crate::lock(&cluster.tasks.unsaved);
            unsaved.insert(id);
            unsaved.extend(ids);
            return;
        }
        // A newer record saved meanwhile may have landed before this older one: written
        // again at the next round.
        let newer = cluster
            .tasks
            .records
            .get(&id)
            .is_some_and(|r| serde_json::to_string(r.value()).is_ok_and(|now| now != json));
        if newer {
            crate::lock(&cluster.tasks.unsaved).insert(id);
        }
    }
}

/// The task `id` as `owner` may see it: this node's copy of a task created here, else the
/// one in Redis. An id that is not a UUID is no task, and is never looked up.
pub(crate) async fn load(cluster: &Cluster, id: &str, owner: &str) -> Result<TaskRecord, Error> {
    let unknown = || Error::UnknownTask {
        task_id: id.chars().take(64).collect(),
    };
    if uuid::Uuid::parse_str(id).is_err() {
        return Err(unknown());
    }
    let now = unix_ms();
    let local = cluster
        .tasks
        .records
        .get(id)
        .map(|r| r.value().clone())
        .filter(|r| r.expires_ms() > now);
    let record = match local {
        Some(record) => Some(record),
        None => match cluster.store.redis() {
            Some(redis) => match redis.get_task(&cluster.metrics, id).await {
                Some(json) => json.and_then(|json| serde_json::from_str::<TaskRecord>(&json).ok()),
                // Not known: told as such (retryable), never as a task that does not exist.
                None => {
                    return Err(Error::TaskStoreUnavailable {
                        retry_after_ms: u64::try_from(redis.retry_after().as_millis())
                            .unwrap_or(u64::MAX),
                    })
                }
            },
            None => None,
        },
    };
    record
        .filter(|r| r.owner == owner && r.expires_ms() > now)
        .ok_or_else(unknown)
}

/// `tasks/update`: gives the answers to the task's runner and waits (briefly) until they
/// are stored. Answers to a finished task, or to keys not outstanding, are ignored.
pub(crate) async fn update(
    cluster: &Cluster,
    id: &str,
    owner: &str,
    responses: Map<String, Value>,
) -> Result<(), Error> {
    let record = load(cluster, id, owner).await?;
    if record.status.is_terminal() {
        return Ok(());
    }
    steer(cluster, id, |applied| Signal::Answer {
        responses: responses.clone(),
        applied,
    })
    .await
}

/// `tasks/cancel`: asks the task's runner to stop and waits (briefly) until the task is
/// stored as cancelled. Cancelling a finished task changes nothing.
pub(crate) async fn cancel(cluster: &Cluster, id: &str, owner: &str) -> Result<(), Error> {
    let record = load(cluster, id, owner).await?;
    if record.status.is_terminal() {
        return Ok(());
    }
    steer(cluster, id, |applied| Signal::Cancel { applied }).await
}

/// Sends the signal `make` builds to the task's runner: on this node, waiting until it
/// applied it; on another node, through Redis.
///
/// # Errors
/// [`Error::TaskStoreUnavailable`] when Redis did not take it (the client sends it again:
/// answers and cancels are idempotent), rather than it being lost.
async fn steer(
    cluster: &Cluster,
    id: &str,
    make: impl Fn(Option<oneshot::Sender<()>>) -> Signal,
) -> Result<(), Error> {
    let (applied, done) = oneshot::channel();
    if cluster.tasks.signal_local(id, make(Some(applied))) {
        let _ = tokio::time::timeout(APPLY_WAIT, done).await;
        return Ok(());
    }
    let (cancel, responses) = match make(None) {
        Signal::Answer { responses, .. } => (false, Some(responses)),
        Signal::Cancel { .. } => (true, None),
        Signal::Shutdown => return Ok(()),
    };
    if crate::cluster::store::bridge::send_task_steer(cluster, id, cancel, responses).await {
        return Ok(());
    }
    let retry_after = cluster
        .store
        .redis()
        .map_or(Duration::ZERO, |redis| redis.retry_after());
    Err(Error::TaskStoreUnavailable {
        retry_after_ms: u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX),
    })
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

    #[tokio::test]
    async fn a_cancel_is_not_lost_to_a_full_queue() {
        let tasks = Tasks::new(&TaskSettings::default());
        let (runner, mut signals) = mpsc::channel(1);
        tasks.running.insert("t".into(), runner);
        let answer = || Signal::Answer {
            responses: Map::new(),
            applied: None,
        };
        assert!(tasks.signal_local("t", answer()));
        // The queue is full: another answer is refused, a cancel waits its turn.
        assert!(!tasks.signal_local("t", answer()));
        assert!(tasks.signal_local("t", Signal::Cancel { applied: None }));
        assert!(matches!(signals.recv().await, Some(Signal::Answer { .. })));
        assert!(matches!(signals.recv().await, Some(Signal::Cancel { .. })));
        assert!(!tasks.signal_local("none", Signal::Cancel { applied: None }));
    }

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_764_566_066_123), "2025-12-01T05:14:26.123Z");
    }

    #[test]
    fn fields_follow_the_status() {
        let settings = TaskSettings::default();
        let mut record = TaskRecord::new("alice", &settings);
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
    fn records_survive_their_stored_form() {
        let mut record = TaskRecord::new("alice", &TaskSettings::default());
        record.result = Some(json!({"content": [{"type": "text", "text": "é"}]}));
        record.set(TaskStatus::Completed);
        let json = serde_json::to_string(&record).expect("encodes");
        assert_eq!(
            serde_json::from_str::<TaskRecord>(&json).expect("decodes"),
            record
        );
    }

    #[test]
    fn reservations_are_bounded() {
        let tasks = Tasks::new(&TaskSettings {
            max_running: 1,
            ..TaskSettings::default()
        });
        let first = tasks.reserve().expect("a slot");
        assert!(matches!(tasks.reserve(), Err(Error::TooManyTasks { .. })));
        drop(first);
        assert!(tasks.reserve().is_ok());
    }
}
