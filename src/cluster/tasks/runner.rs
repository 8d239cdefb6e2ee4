//! Running a call that may become a task.
//!
//! [`begin`] runs the tool until it first waits. Done by then: an ordinary answer (or, for
//! a tool that requires tasks, a task stored already completed). Waiting on the client
//! (an ask the request's `inputResponses` did not answer): a multi round-trip answer, as for
//! any 2026-07-28 request. Waiting on anything else: the call becomes a task; its runner is
//! spawned on this thread, stores the task, and only then is the call answered with it.
//!
//! The runner is the task's only writer. It drives the tool and, between its steps, the
//! task's signals (answers from `tasks/update`, `tasks/cancel`, shutdown): it stores the
//! task whenever its status or its outstanding asks change, cancels it by dropping the
//! tool's future (the tool stops at its next wait), and fails it when its time is up. It
//! holds one of this node's task slots until it ends; a task outlives the request, the
//! session and the connection that created it. Once its node may have been taken for dead,
//! it claims the task's end before it stores anything more, and stops the task when another
//! node showed it failed meanwhile (see [`end`](super::end)).

use super::end::TaskHold;
use super::{create, lose, save, Signal, TaskRecord, TaskSlot, TaskStatus, SIGNAL_CAPACITY};
use crate::cluster::Cluster;
use crate::context::{
    Ask, CancelFlag, ClientRequestError, ContextParts, Deadline, Input, LogFloor, RequestContext,
    SessionInfo, TaskAsks,
};
use crate::mailbox::inbox::Inbox;
use crate::model::{CallToolResult, ForVersion};
use crate::protocol::jsonrpc::RequestId;
use crate::protocol::mcp::Error;
use crate::tool::{Arguments, TaskSupport, ToolError, ToolHandler};
use futures_util::future::{poll_immediate, LocalBoxFuture};
use futures_util::FutureExt;
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// A call that may become a task.
pub(crate) struct TaskCall {
    pub cluster: Arc<Cluster>,
    /// The tool's name, as the client called it (its policy is checked by it).
    pub tool: Box<str>,
    pub handler: Arc<dyn ToolHandler>,
    pub arguments: Arguments,
    /// The request's id (the tool's context reports it).
    pub request_id: RequestId,
    pub trace_id: Option<Box<str>>,
    /// What the request's `_meta` established.
    pub info: Rc<SessionInfo>,
    /// The request's round (answers from `inputResponses` and `requestState`).
    pub asks: Rc<TaskAsks>,
    pub support: TaskSupport,
}

/// How a call that may become a task was answered.
pub(crate) enum Begun {
    /// Done without waiting: an ordinary result.
    Done(Result<CallToolResult, ToolError>),
    /// It asked the client for something the request did not answer.
    InputRequired(Vec<Ask>),
    /// It became a task, stored as this.
    Task(TaskRecord),
}

type Outcome = Result<Result<CallToolResult, ToolError>, Box<dyn std::any::Any + Send>>;

/// See the module docs.
///
/// With `cluster.on_store_error = "refuse"`, a call that may become a task is refused while
/// the node skips Redis, before its tool runs; and a task whose first record Redis does not
/// take is refused too, its tool never polled past its first wait (it stops there, as a
/// cancelled one does): no task runs on one node unseen by the others (attack run 52b, F1).
///
/// # Errors
/// -32008 when this node runs (or keeps) as many tasks as it may, or the caller's
/// identity runs as many as it may, or (`taskStore`) as above; -32603 when the tool
/// panicked before it first waited.
pub(crate) async fn begin(call: TaskCall) -> Result<Begun, Error> {
    let TaskCall {
        cluster,
        tool,
        handler,
        arguments,
        request_id,
        trace_id,
        info,
        asks,
        support,
    } = call;
    if let Some(redis) = cluster.store.redis() {
        // Known unable to take its first record: refused before any work (an ordinary call
        // done at once would not have needed Redis, but which calls end so is not known
        // before they run, and a keyed call is refused so too).
        if cluster.store.refuses_without_redis() && !redis.is_available() {
            return Err(super::store_unavailable(redis.paused_for()));
        }
    }
    let slot = cluster.tasks.reserve(&info.identity)?;
    let settings = &cluster.settings;
    let ttl = Duration::from_millis(settings.tasks.ttl_ms);
    let cancel = CancelFlag::default();
    let owner = info.identity.principal().to_owned();
    let ctx = RequestContext::new(ContextParts {
        id: request_id,
        // Its inbox is its own, no session's.
        serial: 0,
        trace_id,
        // Nothing is posted to it: a task reports no progress, sends no log lines (the
        // extension has neither) and asks through `asks`.
        inbox: Rc::new(Inbox::default()),
        session: info,
        progress_interval: None,
        deadline: Deadline::new(std::time::Instant::now(), ttl, ttl),
        cancel: cancel.clone(),
        client_timeout: Duration::from_millis(settings.client_requests.timeout_ms),
        input: Input::Task(asks.clone()),
        log_floor: LogFloor::Request(None),
        log_budget: crate::mailbox::throttle::LineBudget::unlimited(),
    });
    let mut work: LocalBoxFuture<'static, Outcome> = Box::pin(crate::worker::DropCaught::new(
        AssertUnwindSafe(handler.call(arguments, ctx)).catch_unwind(),
    ));
    let first = poll_immediate(&mut work).await;
    let mut record = TaskRecord::new(&owner, &tool, &settings.tasks);
    record.node = cluster.node_number();
    match first {
        Some(Ok(outcome)) if support == TaskSupport::Optional => return Ok(Begun::Done(outcome)),
        Some(Err(panic)) if support == TaskSupport::Optional => {
            crate::drop_catching_panics(panic);
            cluster.metrics.panicked.inc();
            return Err(Error::Internal);
        }
        Some(outcome) => {
            // Required, and done at once: a task, finished already.
            finish(&cluster, &mut record, outcome);
            save(&cluster, &mut record).await;
            cluster.metrics.tasks_created.inc();
            return Ok(Begun::Task(record));
        }
        None if asks.rounds().has_asks() => {
            return Ok(Begun::InputRequired(asks.rounds().take_asks()));
        }
        None => {}
    }
    asks.detach();
    let (signals, receiver) = mpsc::channel(SIGNAL_CAPACITY);
    cluster.tasks.running.insert(record.id.clone(), signals);
    let hold = TaskHold::new(&cluster);
    cluster.tasks.holds.insert(record.id.clone(), hold);
    let (stored, created) = oneshot::channel();
    let runner = Runner {
        cluster: cluster.clone(),
        hold,
        record: record.clone(),
        asked: Vec::new(),
        work,
        asks,
        signals: receiver,
        cancel,
        _slot: slot,
    };
    // On this thread (the tool's future is not `Send`), on a task of its own: the request
    // that created it may end (or be cancelled) while it runs.
    actix_rt::spawn(runner.run(stored));
    // Answered once the task is stored, so that a `tasks/get` for it resolves.
    if let Ok(Err(refused)) = created.await {
        return Err(refused);
    }
    cluster.metrics.tasks_created.inc();
    Ok(Begun::Task(record))
}

/// A running task. See the module docs.
struct Runner {
    cluster: Arc<Cluster>,
    /// The task as last stored, but for its questions: the store keeps those, and the runner
    /// only their keys (`asked`), so that a parked task's questions are not held once more.
    record: TaskRecord,
    /// The keys of the outstanding asks last stored, sorted.
    asked: Vec<String>,
    work: LocalBoxFuture<'static, Outcome>,
    asks: Rc<TaskAsks>,
    signals: mpsc::Receiver<Signal>,
    cancel: CancelFlag,
    /// Where it stands in claiming the task's end (see [`end`](super::end)).
    hold: TaskHold,
    _slot: TaskSlot,
}

impl Drop for Runner {
    /// The task off the node's runners and holds, however its runner ends (refused, done,
    /// or its thread's task dropped): a signal for it is no longer queued for nobody.
    fn drop(&mut self) {
        self.cluster.tasks.running.remove(&self.record.id);
        self.cluster.tasks.holds.remove(&self.record.id);
    }
}

impl Runner {
    async fn run(mut self, stored: oneshot::Sender<Result<(), Error>>) {
        let cluster = self.cluster.clone();
        let _running = cluster.metrics.tasks_running.track();
        // Whether the record is stored as it ends already (found lost).
        let mut stored_as_ended = !self.claim().await;
        let created = match stored_as_ended {
            true => {
                save(&cluster, &mut self.record).await;
                Ok(())
            }
            false => create(&cluster, &mut self.record).await,
        };
        if let Err(refused) = created {
            // Its work is dropped unpolled since its first wait: it stops there. Gone from
            // the node's runners before the refusal is told.
            self.cancel.set();
            drop(self);
            let _ = stored.send(Err(refused));
            return;
        }
        let _ = stored.send(Ok(()));
        let expiry = tokio::time::sleep(self.record.remaining());
        tokio::pin!(expiry);
        // Set when the server's shutdown grace ran out.
        let mut stopping = cluster.tasks.stopping();
        // Changes when a beat finds the node taken for dead: the task is claimed at once,
        // and stops if it is lost, not only at its next change (which may be its end).
        let mut findings = cluster.findings();
        while !stored_as_ended {
            tokio::select! {
                biased;
                outcome = &mut self.work => {
                    finish(&self.cluster, &mut self.record, outcome);
                    break;
                }
                signal = self.signals.recv() => match signal {
                    Some(Signal::Answer { responses, applied }) => {
                        self.asks.answer(responses);
                        let goes_on = self.sync_asks().await;
                        if let Some(applied) = applied {
                            let _ = applied.send(());
                        }
                        if !goes_on {
                            self.cancel.set();
                            stored_as_ended = true;
                        }
                    }
                    Some(Signal::Cancel { applied }) => {
                        self.cancel.set();
                        self.record.set(TaskStatus::Cancelled);
                        self.store().await;
                        if let Some(applied) = applied {
                            let _ = applied.send(());
                        }
                        stored_as_ended = true;
                    }
                    // Its node's own queue gone: the server stops.
                    None => {
                        self.cancel.set();
                        fail(&mut self.record, &Error::ShuttingDown);
                        break;
                    }
                },
                _ = stopping.wait_for(|stopping| *stopping) => {
                    self.cancel.set();
                    fail(&mut self.record, &Error::ShuttingDown);
                    break;
                }
                Ok(()) = findings.changed() => if !self.claim().await {
                    save(&self.cluster, &mut self.record).await;
                    stored_as_ended = true;
                },
                () = self.asks.changed() => if !self.sync_asks().await {
                    self.cancel.set();
                    stored_as_ended = true;
                },
                () = &mut expiry => {
                    self.cancel.set();
                    let timeout_ms = self.record.ttl_ms;
                    fail(&mut self.record, &Error::TimedOut { timeout_ms });
                    break;
                }
            }
        }
        if !stored_as_ended {
            self.store().await;
        }
        // Dropping `self` drops the tool's future (a cancelled task stops at its next wait)
        // and takes the task off the node's runners.
    }

    /// Claims the task's end when its node may have been taken for dead since the last
    /// claim (else a look at the beats): false when another node showed it failed, the task
    /// then stopped and its record failed, -32031 (to be stored).
    async fn claim(&mut self) -> bool {
        if !self.hold.due(&self.cluster) {
            return true;
        }
        let held = self.hold.hold(&self.cluster, &self.record.id).await;
        self.cluster
            .tasks
            .holds
            .insert(self.record.id.clone(), self.hold);
        if !held {
            self.cancel.set();
            lose(&mut self.record);
        }
        held
    }

    /// Stores the task, claimed first ([`claim`](Self::claim)): false when it was lost, and
    /// stored failed instead.
    async fn store(&mut self) -> bool {
        let held = self.claim().await;
        save(&self.cluster, &mut self.record).await;
        held
    }

    /// Stores the task when its outstanding asks changed: `input_required` with them, or
    /// `working` again once none is left. False when the questions were too large to keep
    /// (`tasks.max_stored_bytes`): the task is then stored as failed, and is to end.
    async fn sync_asks(&mut self) -> bool {
        // Compared by their keys, which name the asks: the same keys are the same asks, and
        // their questions are copied only when stored.
        let keys = self.asks.outstanding_keys();
        if keys == self.asked {
            return true;
        }
        let status = if keys.is_empty() {
            TaskStatus::Working
        } else {
            TaskStatus::InputRequired
        };
        self.asked = keys;
        self.record.input_requests = self.asks.outstanding();
        self.record.set(status);
        // Lost, it is stored failed: the check below ends it.
        self.store().await;
        // Stored: the runner keeps their keys, not the questions (a parked task held them
        // once more here). Every later store of the task either asks again (here) or ends
        // it, which clears them.
        self.record.input_requests = serde_json::Map::new();
        self.record.status != TaskStatus::Failed
    }
}

/// What a `tasks/get` answer holds besides the task's result, at most (its JSON-RPC
/// envelope with a request id of up to 1 KiB, the task's id, status, times and hints), for
/// the result's bound below.
const POLL_ANSWER_OVERHEAD_BYTES: usize = 4096;

/// Records how the tool ended: its result (an `isError` one too) completes the task; a
/// capability the request did not declare, a panic, or a result no `tasks/get` answer could
/// carry within `limits.max_message_bytes` fails it (the result was stored, and every poll
/// for the task's lifetime answered -32603 instead of how it ended).
fn finish(cluster: &Cluster, record: &mut TaskRecord, outcome: Outcome) {
    let result = match outcome {
        Ok(Ok(result)) => result,
        Ok(Err(ToolError::Client(ClientRequestError::NotSupported { capability }))) => {
            let required = crate::protocol::mcp::required_capabilities(capability);
            return fail(record, &Error::MissingClientCapability { required });
        }
        Ok(Err(ToolError::Rpc(error))) => return fail(record, &error.into()),
        Ok(Err(error)) => error.into_result(),
        Err(panic) => {
            // The panic went to the log through the panic hook; the task says no more.
            crate::drop_catching_panics(panic);
            cluster.metrics.panicked.inc();
            return fail(record, &Error::Internal);
        }
    };
    let version = crate::protocol::mcp::ProtocolVersion::V2026_07_28;
    let limit = cluster.settings.limits.max_message_bytes;
    match serde_json::to_value(ForVersion(&result, version)) {
        Ok(value) => {
            let encoded = usize::try_from(super::json_len(&value))
                .unwrap_or(usize::MAX)
                .saturating_add(POLL_ANSWER_OVERHEAD_BYTES);
            if encoded > limit {
                return fail(record, &Error::AnswerOverMessageLimit { encoded, limit });
            }
            record.result = Some(value);
            record.set(TaskStatus::Completed);
        }
        Err(_) => fail(record, &Error::Internal),
    }
}

/// Fails the task with `error` (its JSON-RPC error object).
pub(super) fn fail(record: &mut TaskRecord, error: &Error) {
    record.error = serde_json::to_value(error.to_wire_stateless()).ok();
    record.result = None;
    record.set(TaskStatus::Failed);
}
