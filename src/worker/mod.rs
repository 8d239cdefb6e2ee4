//! The per-request worker actor. The session starts one `RequestWorker` for each request
//! that awaits (today `tools/call`); it waits for a slot in the global pool, runs the work
//! under a deadline, and reports back to its session with messages: progress and log lines
//! while it runs, exactly one `Finished` at the end.
//!
//! Cancellation is a `Cancel` message: the worker stops, and stopping an actix actor drops
//! every future spawned in its context, so the work stops at its next await point and the
//! pool permit is returned. The worker never touches the socket; its session decides what to
//! write (and drops whatever arrives for a request no longer in flight).

mod context;

pub use context::{CancelFlag, SessionInfo, ToolContext};

use crate::error::Error;
use crate::jsonrpc::RequestId;
use crate::mcp::LogLevel;
use crate::shared::Shared;
use actix::prelude::*;
use context::Deadline;
use futures_util::future::LocalBoxFuture;
use futures_util::FutureExt;
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::TryAcquireError;
use tracing::Instrument;

/// The work a worker runs: given the tool context, the encoded response frame (serialized
/// straight into the frame, see `jsonrpc::encode_result_with`) or an error.
pub type Work = Box<dyn FnOnce(ToolContext) -> LocalBoxFuture<'static, Result<String, Error>>>;

/// Where a session's workers send their events: the session actor's address, made once per
/// session and shared by its workers and their tool contexts. (Cloning a `Recipient`
/// allocates three times; cloning this `Rc` does not.)
pub type SessionInbox = Rc<Recipient<WorkerEvent>>;

/// Worker → session messages.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub enum WorkerEvent {
    Progress {
        id: RequestId,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    },
    Log {
        id: RequestId,
        level: LogLevel,
        data: serde_json::Value,
    },
    /// The last message of every worker that was not cancelled: the response frame, or the
    /// error to answer with.
    Finished {
        id: RequestId,
        outcome: Result<String, Error>,
    },
}

/// Session → worker: stop now, send nothing more.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Cancel;

/// Everything a worker needs, handed over at start.
pub struct Job {
    pub id: RequestId,
    pub work: Work,
    /// Run-time limit, counted from admission into the pool.
    pub timeout: Duration,
    pub wants_progress: bool,
    pub session: SessionInbox,
    pub session_info: SessionInfo,
    pub shared: Arc<Shared>,
    /// The worker's span, a child of the request's (session, id, method): the work and its
    /// outcome are logged inside it.
    pub span: tracing::Span,
}

pub struct RequestWorker {
    job: Option<Job>,
    cancel: CancelFlag,
}

impl RequestWorker {
    pub fn new(job: Job) -> Self {
        Self {
            job: Some(job),
            cancel: CancelFlag::default(),
        }
    }
}

impl Actor for RequestWorker {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let Some(job) = self.job.take() else {
            return;
        };
        let session = job.session.clone();
        let id = job.id.clone();
        let cancel = self.cancel.clone();
        let span = job.span.clone();
        let started = tracing::enabled!(tracing::Level::DEBUG).then(Instant::now);
        ctx.spawn(
            run(job, cancel)
                .instrument(span.clone())
                .into_actor(self)
                .map(move |outcome, _worker, ctx| {
                    if let Some(started) = started {
                        let _entered = span.enter();
                        tracing::debug!(
                            elapsed_us = started.elapsed().as_micros() as u64,
                            outcome = if outcome.is_ok() { "ok" } else { "error" },
                            "worker finished"
                        );
                    }
                    session.do_send(WorkerEvent::Finished { id, outcome });
                    ctx.stop();
                }),
        );
    }

    fn stopping(&mut self, _ctx: &mut Self::Context) -> Running {
        // Work that moved to another thread (spawn_blocking) can observe this.
        self.cancel.set();
        Running::Stop
    }
}

impl Handler<Cancel> for RequestWorker {
    type Result = ();

    fn handle(&mut self, _msg: Cancel, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

/// Admission, then the work under its deadline, with panics turned into -32603.
async fn run(job: Job, cancel: CancelFlag) -> Result<String, Error> {
    let shared = job.shared;
    let metrics = &shared.metrics;
    let limits = &shared.settings.limits;

    // Fast path: a free slot is taken without arming the wait's timer.
    let permit = match shared.pool.clone().try_acquire_owned() {
        Ok(permit) => permit,
        Err(TryAcquireError::Closed) => return Err(Error::ShuttingDown),
        Err(TryAcquireError::NoPermits) => {
            let _waiting = metrics.pool_waiting.track();
            let wait = Duration::from_millis(limits.admission_wait_ms);
            match tokio::time::timeout(wait, shared.pool.clone().acquire_owned()).await {
                Ok(Ok(permit)) => permit,
                Ok(Err(_closed)) => return Err(Error::ShuttingDown),
                Err(_elapsed) => {
                    metrics.rejected_server_busy.inc();
                    return Err(Error::ServerBusy {
                        limit: limits.max_concurrent_requests,
                        waited_ms: limits.admission_wait_ms,
                    });
                }
            }
        }
    };
    let _running = metrics.pool_running.track();

    let deadline = Deadline::new(
        job.timeout,
        Duration::from_millis(limits.max_request_timeout_ms),
    );
    let ctx = ToolContext::new(
        job.id,
        job.session,
        job.wants_progress,
        Duration::from_millis(shared.settings.progress.min_interval_ms),
        deadline,
        cancel,
        job.session_info,
    );
    let clock = ctx.clone();
    let work = AssertUnwindSafe((job.work)(ctx)).catch_unwind();
    let outcome = tokio::select! {
        // Work first: work that is ready at once never registers the deadline's timer.
        biased;
        outcome = work => match outcome {
            Ok(outcome) => outcome,
            Err(_panic) => {
                // The panic message went to the log through the panic hook; the client
                // gets a plain -32603 and the session lives on.
                metrics.panicked.inc();
                Err(Error::Internal)
            }
        },
        () = clock.deadline_expired() => {
            metrics.timed_out.inc();
            Err(Error::TimedOut { timeout_ms: job.timeout.as_millis() as u64 })
        }
    };
    drop(permit);
    outcome
}
