//! The per-request worker. The session starts one for each request that runs user code (a
//! tool call, a resource read, a prompt render, a completion); it waits for a slot in the
//! global pool, runs the work under a deadline, and reports back to its session through the
//! session's inbox: progress, log lines and client requests while it runs (through the
//! request's context), exactly one `Finished` at the end.
//!
//! A worker runs at once on its session's task, as far as it gets without waiting. Work done
//! by then (most tool calls) is over; work that waits (a long request) continues as a
//! `RequestWorker` actor on a task of its own (see [`RequestWorker::run`]).
//!
//! Cancellation is a `Cancel` message to that actor: it stops, and stopping an actix actor
//! drops every future spawned in its context, so the work stops at its next await point
//! (after one last run, see the handler) and the pool permit is returned. The worker never
//! touches the socket; its session decides what to write (and drops whatever arrives for a
//! request no longer in flight).

mod work;

pub use work::{Outcome, ToolCall, Work};

use crate::config::Settings;
use crate::context::{
    Ask, CancelFlag, ContextParts, Deadline, Input, LogFloor, RequestContext, Rounds, SessionInfo,
};
use crate::mailbox::inbox::{Inbox, RequestSerial, SessionEvent};
use crate::mailbox::throttle::LineBudget;
use crate::observe::metrics::Metrics;
use crate::protocol::jsonrpc::RequestId;
use crate::protocol::mcp::Error;
use actix::prelude::*;
use futures_util::future::poll_immediate;
use futures_util::FutureExt;
use std::cell::Cell;
use std::collections::VecDeque;
use std::future::Future;
use std::net::IpAddr;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, Semaphore, SemaphorePermit, TryAcquireError};
use tracing::Instrument;

/// Answers a 2026-07-28 request that asked the client for something it has no answer to:
/// given the request's id and the asks, the `InputRequiredResult` frame.
pub type OnInput = Box<dyn FnOnce(RequestId, Vec<Ask>) -> Result<String, Error>>;

/// Session → worker: stop now, send nothing more.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Cancel;

/// The global worker pool, and what every worker reads: one permit per running request
/// across all sessions, the settings (limits, progress interval, client request timeout) and
/// the metrics it counts in.
///
/// Fair shares: the last `limits.pool_reserve` free slots go only to requests of sessions
/// that hold no slot yet (see [`PoolShare`]), and to one such session of a client address at
/// a time (many sessions of one client, each holding one slot, would take the whole reserve);
/// a request of a session that holds some, or of an address holding a slot of the reserve,
/// waits until more are free. Parked sessions yield: a request that finds no slot for it first
/// asks the oldest WebSocket session parked with work in flight (see [`Pool::park`]) to
/// give up its work, whose slots then go to the waiting requests.
pub struct Pool {
    permits: Semaphore,
    /// `limits.pool_reserve`.
    reserve: usize,
    /// Requests of sessions holding slots that wait for more than `reserve` to be free.
    share_waiters: AtomicUsize,
    /// Client addresses (as the session limits count them) with a session that took a slot
    /// of the reserve and holds slots still: how many such sessions each.
    reserve_holders: dashmap::DashMap<IpAddr, usize>,
    /// Woken when a slot comes back while `share_waiters` is not 0.
    returned: Notify,
    /// Parked sessions with work in flight, oldest first.
    parked: Mutex<VecDeque<(u64, Recipient<Yield>)>>,
    settings: Arc<Settings>,
    metrics: Arc<Metrics>,
}

/// Pool → a parked session: give up the work you have in flight (a live session waits for a
/// slot).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Yield;

/// How many pool slots the requests of one session hold now: shared by the session and its
/// workers, all on the session's thread. A fresh one holds none.
#[derive(Debug, Clone, Default)]
pub struct PoolShare(Rc<ShareState>);

#[derive(Debug, Default)]
struct ShareState {
    held: Cell<usize>,
    /// Its first slot (of those it holds now) came from the reserve: its address is in
    /// [`Pool::reserve_holders`] until it holds none again.
    from_reserve: Cell<bool>,
    /// The client's address as the session limits count it (`None`: not known, the
    /// library's in-memory transport).
    client: Option<IpAddr>,
}

impl PoolShare {
    /// The share of a session of the client `client` (its address as the session limits
    /// count it: `perimeter::connections::client_key`).
    pub fn of_client(client: Option<IpAddr>) -> Self {
        Self(Rc::new(ShareState {
            client,
            ..ShareState::default()
        }))
    }

    /// Slots held now.
    pub fn held(&self) -> usize {
        self.0.held.get()
    }
}

impl Pool {
    /// A pool of `limits.max_concurrent_requests` permits.
    pub fn new(settings: Arc<Settings>, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Self {
            permits: Semaphore::new(settings.limits.max_concurrent_requests),
            reserve: settings.limits.pool_reserve(),
            share_waiters: AtomicUsize::new(0),
            reserve_holders: dashmap::DashMap::new(),
            returned: Notify::new(),
            parked: Mutex::new(VecDeque::new()),
            settings,
            metrics,
        })
    }

    /// A parked session (`session`, its server-unique number) has work in flight: it is
    /// asked through `to` to give it up when a live session needs a slot. Oldest first.
    pub fn park(&self, session: u64, to: Recipient<Yield>) {
        if let Ok(mut parked) = self.parked.lock() {
            parked.retain(|(id, _)| *id != session);
            parked.push_back((session, to));
        }
    }

    /// The session is resumed, or ended, or has no work in flight any more.
    pub fn unpark(&self, session: u64) {
        if let Ok(mut parked) = self.parked.lock() {
            parked.retain(|(id, _)| *id != session);
        }
    }

    /// Asks the oldest parked session with work in flight to give it up; whether there was
    /// one.
    fn reclaim(&self) -> bool {
        let oldest = self.parked.lock().ok().and_then(|mut p| p.pop_front());
        match oldest {
            Some((session, to)) => {
                tracing::debug!(session, "a parked session yields its work to a live one");
                to.do_send(Yield);
                true
            }
            None => false,
        }
    }

    /// A slot for a request of a session holding `share`, if one is free for it now.
    fn try_take<'p>(&'p self, share: &PoolShare) -> Result<Slot<'p>, TryAcquireError> {
        // The address is asked only once the pool is down to its reserve.
        if self.permits.available_permits() <= self.reserve && self.waits_for_more(share) {
            return Err(TryAcquireError::NoPermits);
        }
        let permit = self.permits.try_acquire()?;
        Ok(Slot::new(self, permit, share))
    }

    /// Whether a request of `share`'s session may not have a slot of the reserve: its
    /// session holds some, or a session of its address took one of the reserve already.
    fn waits_for_more(&self, share: &PoolShare) -> bool {
        share.held() > 0
            || share
                .0
                .client
                .is_some_and(|client| self.reserve_holders.contains_key(&client))
    }

    /// Permits free now (tests check that every permit came back).
    #[cfg(feature = "testing")]
    pub fn available_permits(&self) -> usize {
        self.permits.available_permits()
    }
}

/// Everything a worker needs, handed over at start.
pub struct Job {
    pub id: RequestId,
    /// Which request of that id, in its session (see [`RequestSerial`]).
    pub serial: RequestSerial,
    /// When the request arrived in its session (the clock read its latency starts from):
    /// also the deadline's start when a pool slot is free at once.
    pub received: Instant,
    pub work: Work,
    /// Run-time limit, counted from admission into the pool.
    pub timeout: Duration,
    pub wants_progress: bool,
    /// The trace id of the request's own `_meta.traceparent`, if any.
    pub trace_id: Option<Box<str>>,
    /// The session's inbox, where the outcome and everything the work reports go.
    pub inbox: Rc<Inbox>,
    pub session: Rc<SessionInfo>,
    /// How the work's asks reach the client.
    pub input: Input,
    /// Which log lines of the work go out.
    pub log_floor: LogFloor,
    /// For a 2026-07-28 request (`input` is `Input::Rounds`): how to answer when the work
    /// asks for something it has no answer to.
    pub on_input: Option<OnInput>,
    /// The pool it runs in.
    pub pool: Arc<Pool>,
    /// The slots its session's requests hold.
    pub share: PoolShare,
    /// The worker's span, a child of the request's (session, id, method): the work and its
    /// outcome are logged inside it.
    pub span: tracing::Span,
}

/// The worker actor of a request whose work waits. Its work is spawned into its context
/// before it starts (see [`RequestWorker::run`]); the actor itself only holds what must
/// outlive the work.
pub struct RequestWorker {
    cancel: CancelFlag,
}

type WorkerFuture = actix::dev::ContextFut<RequestWorker, Context<RequestWorker>>;

/// A request's work, made of its job: the outcome, once admitted and run.
type Execution = Pin<Box<dyn Future<Output = Result<String, Error>>>>;

/// A started worker, as its session holds it.
pub enum WorkerHandle {
    /// The work finished in its first poll: its `Finished` waits in the inbox, and there is
    /// nothing left to stop.
    Finished,
    /// The work waits: its actor, which [`Cancel`] stops.
    Running(Addr<RequestWorker>),
}

impl WorkerHandle {
    /// Stops the work if it still runs; it sends nothing more.
    pub fn cancel(&self) {
        if let Self::Running(worker) = self {
            worker.do_send(Cancel);
        }
    }
}

impl RequestWorker {
    /// Starts the work of `job` at once, on the caller's (the session's) task, as far as it
    /// gets without waiting. Work that is done by then (most tool calls) never needs an actor:
    /// its outcome goes to the inbox like any worker's, and nothing was allocated for a
    /// context, a mailbox or a task it would not use (`Actor::start` spawned a task per
    /// request, a tenth of the server's instructions per request, and the context and its
    /// mailbox cost about as much again). Work that waits becomes a worker actor on a task of
    /// its own, as with `Actor::start`: its own context, mailbox and address, `Cancel` in and
    /// its outcome out as messages, never a call into the session.
    pub fn run(job: Job) -> WorkerHandle {
        let (mut execution, cancel, report) = Self::prepare(job);
        // No waker is needed for this first poll: if the work is not done, the actor's task
        // polls it again at once, and that poll registers every wakeup it waits for.
        let mut first_poll = std::task::Context::from_waker(std::task::Waker::noop());
        match execution.as_mut().poll(&mut first_poll) {
            std::task::Poll::Ready(outcome) => {
                // As a worker actor's drop does: work the tool moved to another thread
                // (spawn_blocking) sees that the request is over, whether it was answered or
                // stopped here (an ask that ends a 2026-07-28 round, the deadline).
                cancel.set();
                report.send(outcome);
                WorkerHandle::Finished
            }
            std::task::Poll::Pending => {
                let (address, worker) = Self::actor(execution, cancel, report);
                actix_rt::spawn(worker);
                WorkerHandle::Running(address)
            }
        }
    }

    /// Starts the worker the way `Actor::start` would: an actor on a task of its own from the
    /// first poll. The server uses [`run`](Self::run); this is its reference in
    /// `benches/codec.rs`.
    #[cfg(feature = "testing")]
    pub fn spawn(job: Job) -> Addr<Self> {
        let (execution, cancel, report) = Self::prepare(job);
        let (address, worker) = Self::actor(execution, cancel, report);
        actix_rt::spawn(worker);
        address
    }

    /// The work of `job`, not yet polled, with its cancel flag and where its outcome goes.
    fn prepare(mut job: Job) -> (Execution, CancelFlag, Report) {
        let cancel = CancelFlag::default();
        // `execute` has no use for the span: it runs inside it.
        let span = std::mem::replace(&mut job.span, tracing::Span::none());
        let report = Report {
            inbox: job.inbox.clone(),
            id: job.id.clone(),
            serial: job.serial,
            started: tracing::enabled!(tracing::Level::DEBUG).then(Instant::now),
            span: span.clone(),
        };
        // Pinned in a box: polled here first, then, if it waits, moved into an actor.
        let execution = Box::pin(execute(job, cancel.clone()).instrument(span));
        (execution, cancel, report)
    }

    /// The actor that runs `execution` to its end (or until cancelled), as a future not yet
    /// polled.
    fn actor(
        execution: Execution,
        cancel: CancelFlag,
        report: Report,
    ) -> (Addr<Self>, WorkerFuture) {
        let mut context = Context::new();
        context.spawn(actix::fut::wrap_future::<_, Self>(execution).map(
            move |outcome, _worker, ctx| {
                report.send(outcome);
                ctx.stop();
            },
        ));
        (context.address(), context.into_future(Self { cancel }))
    }
}

/// Where a worker's outcome goes: its session's inbox, as its request's one `Finished`.
struct Report {
    inbox: Rc<Inbox>,
    id: RequestId,
    serial: RequestSerial,
    /// When the work started, only when debug logs are on.
    started: Option<Instant>,
    span: tracing::Span,
}

impl Report {
    fn send(self, outcome: Result<String, Error>) {
        if let Some(started) = self.started {
            let _entered = self.span.enter();
            tracing::debug!(
                elapsed_us = started.elapsed().as_micros() as u64,
                outcome = if outcome.is_ok() { "ok" } else { "error" },
                "worker finished"
            );
        }
        self.inbox.post(SessionEvent::Finished {
            id: self.id,
            serial: self.serial,
            outcome,
        });
    }
}

impl Actor for RequestWorker {
    type Context = Context<Self>;
}

impl Drop for RequestWorker {
    fn drop(&mut self) {
        // Work that moved to another thread (spawn_blocking) can observe this. A worker is
        // dropped once it stopped, and also without stopping when the arbiter shuts down.
        self.cancel.set();
    }
}

impl Handler<Cancel> for RequestWorker {
    type Result = ();

    /// Stops the work at its next wait, after one more run: whatever the session settled
    /// for it before cancelling reaches the tool first (when a session ends, a request the
    /// tool made to the client fails with `Disconnected`, and the tool sees why). The stop is
    /// an item spawned after the work, and a context polls its items in the order they were
    /// spawned, each time it is woken (as it is by this message).
    fn handle(&mut self, _msg: Cancel, ctx: &mut Self::Context) {
        self.cancel.set();
        let stop = ActorFutureExt::map(
            fut::ready(()),
            |(), _worker: &mut Self, ctx: &mut Context<Self>| ctx.stop(),
        );
        ctx.spawn(stop);
    }
}

/// Admission, then the work under its deadline, with panics turned into -32603.
///
/// The waits only some requests need (for a slot in a full pool; for work that does not
/// finish at once, against its deadline) run in boxed futures of their own, so their timers
/// do not add to the size of this future, which is copied into its box whole (see
/// `RequestWorker::prepare`).
fn execute(job: Job, cancel: CancelFlag) -> impl Future<Output = Result<String, Error>> {
    // Taken apart here, outside the async block: an async fn keeps its arguments whole for
    // its whole life, beside the locals they are moved into (768 bytes of future, against
    // 376 this way, when it was measured; 560 since a tool call's work is held inline, see
    // `work`).
    let Job {
        id,
        serial,
        received,
        work,
        timeout,
        wants_progress,
        trace_id,
        inbox,
        session,
        input,
        log_floor,
        on_input,
        pool,
        share,
        span: _,
    } = job;
    async move {
        let metrics = &pool.metrics;
        let limits = &pool.settings.limits;

        // The timeout counts from admission into the pool. Admitted at once, that is when the
        // request arrived, a moment ago: its clock read serves, and this path reads no clock.
        let (permit, admitted) = match pool.try_take(&share) {
            Ok(permit) => (permit, received),
            Err(TryAcquireError::Closed) => return Err(Error::ShuttingDown),
            Err(TryAcquireError::NoPermits) => {
                let permit = Box::pin(wait_for_slot(&pool, &share)).await?;
                if cancel.is_set() {
                    // Cancelled while it waited, and run once more before it stops (see the
                    // `Cancel` handler): the work must not start now. The stop comes next.
                    return std::future::pending().await;
                }
                (permit, Instant::now())
            }
        };
        let _running = metrics.pool_running.track();

        let deadline = Deadline::new(
            admitted,
            timeout,
            Duration::from_millis(limits.max_request_timeout_ms),
        );
        let rounds = match &input {
            Input::Rounds(rounds) => Some(rounds.clone()),
            _ => None,
        };
        let ctx = RequestContext::new(ContextParts {
            id: id.clone(),
            serial,
            trace_id,
            inbox,
            session,
            progress_interval: wants_progress
                .then(|| Duration::from_millis(pool.settings.progress.min_interval_ms)),
            deadline,
            cancel,
            client_timeout: Duration::from_millis(pool.settings.client_requests.timeout_ms),
            input,
            log_floor,
            log_budget: LineBudget::new(limits.log_lines_per_second, limits.log_lines_burst),
        });
        let clock = ctx.clone();
        // Starting the work calls a tool's handler, which may panic before it returns its
        // future (a typed tool whose function is not `async`): caught like a panic in a poll.
        let started = std::panic::catch_unwind(AssertUnwindSafe(|| work.start(id.clone(), ctx)));
        let ended = match started {
            Err(panic) => Ended::Done(Err(panic)),
            Ok(work) => {
                let mut work = AssertUnwindSafe(work).catch_unwind();
                // Work that is ready at once never arms the deadline's timer.
                match poll_immediate(&mut work).await {
                    Some(outcome) => Ended::Done(outcome),
                    None => {
                        let ended =
                            Box::pin(before_deadline(&mut work, &clock, rounds.as_deref())).await;
                        if !matches!(ended, Ended::Done(_)) {
                            // Dropped before it is done: a panic of its `Drop` is caught as
                            // one of its poll (see `DropCaught`). Here rather than by the
                            // wrapper, which cost every request 40 instructions (callgrind).
                            crate::drop_catching_panics(work);
                        }
                        ended
                    }
                }
            }
        };
        drop(permit);
        match ended {
            Ended::Done(Ok(outcome)) => outcome,
            Ended::Done(Err(panic)) => {
                // The panic message went to the log through the panic hook; the client gets a
                // plain -32603 and the session lives on.
                crate::drop_catching_panics(panic);
                metrics.panicked.inc();
                Err(Error::Internal)
            }
            Ended::TimedOut => {
                metrics.timed_out.inc();
                Err(Error::TimedOut {
                    timeout_ms: timeout.as_millis() as u64,
                })
            }
            Ended::InputNeeded => {
                let asks = rounds.as_deref().map(Rounds::take_asks).unwrap_or_default();
                match on_input {
                    Some(answer) => answer(id, asks),
                    None => Err(Error::Internal),
                }
            }
        }
    }
}

/// A task's tool future, whose drop before it is done (a cancel, a shutdown) is caught
/// like a panic in its poll, so that its runner goes on to store how the task ended. The
/// panic hook logs it. (A worker catches the drop of its work where it ends before the work
/// is done, a timeout or an ask that ends a 2026-07-28 round, off the path of work done at
/// once; a worker actor's task dropped by a cancel is tokio's, which catches a panic of its
/// drop.)
pub(crate) struct DropCaught<F>(Option<F>);

impl<F> DropCaught<F> {
    /// `work`, its drop caught.
    pub(crate) fn new(work: F) -> Self {
        Self(Some(work))
    }
}

impl<F: Future + Unpin> Future for DropCaught<F> {
    type Output = F::Output;

    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        match self.0.as_mut() {
            Some(work) => Pin::new(work).poll(cx),
            None => std::task::Poll::Pending,
        }
    }
}

impl<F> Drop for DropCaught<F> {
    fn drop(&mut self) {
        if let Some(work) = self.0.take() {
            crate::drop_catching_panics(work);
        }
    }
}

/// How the work of a worker ended.
enum Ended<T> {
    Done(T),
    TimedOut,
    /// A 2026-07-28 request asked for something it has no answer to; the work was stopped
    /// there.
    InputNeeded,
}

/// A slot of the global pool, counted in its session's share while held.
struct Slot<'p> {
    pool: &'p Pool,
    share: PoolShare,
    permit: Option<SemaphorePermit<'p>>,
}

impl<'p> Slot<'p> {
    fn new(pool: &'p Pool, permit: SemaphorePermit<'p>, share: &PoolShare) -> Self {
        let state = &share.0;
        let held = state.held.get();
        state.held.set(held + 1);
        // A first slot taken from the reserve: the address has one (see `Pool`).
        if held == 0 && pool.permits.available_permits() < pool.reserve {
            if let Some(client) = state.client {
                crate::take_place(&pool.reserve_holders, client, usize::MAX);
                state.from_reserve.set(true);
            }
        }
        Self {
            pool,
            share: share.clone(),
            permit: Some(permit),
        }
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let state = &self.share.0;
        let held = state.held.get().saturating_sub(1);
        state.held.set(held);
        if held == 0 && state.from_reserve.replace(false) {
            if let Some(client) = &state.client {
                crate::give_back_place(&self.pool.reserve_holders, client);
            }
        }
        // The permit goes back first: a waiter woken below (on any thread) finds it free.
        drop(self.permit.take());
        if self.pool.share_waiters.load(Ordering::Acquire) > 0 {
            self.pool.returned.notify_waiters();
        }
    }
}

/// Waits up to `admission_wait_ms` for a slot in the global pool. A parked session with
/// work in flight is asked to give it up first.
async fn wait_for_slot<'p>(pool: &'p Pool, share: &PoolShare) -> Result<Slot<'p>, Error> {
    let metrics = &pool.metrics;
    let limits = &pool.settings.limits;
    let _waiting = metrics.pool_waiting.track();
    pool.reclaim();
    let wait = Duration::from_millis(limits.admission_wait_ms);
    match tokio::time::timeout(wait, take_when_free(pool, share)).await {
        Ok(taken) => taken,
        Err(_elapsed) => {
            metrics.rejections.server_busy.inc();
            Err(Error::ServerBusy {
                limit: limits.max_concurrent_requests,
                waited_ms: limits.admission_wait_ms,
            })
        }
    }
}

/// A slot for a request of the session holding `share`: in the pool's queue, in turn, for
/// a session that holds none; for one that holds some, once more than the reserve is free.
/// -32004 when the pool is closed.
async fn take_when_free<'p>(pool: &'p Pool, share: &PoolShare) -> Result<Slot<'p>, Error> {
    loop {
        if pool.waits_for_more(share) {
            pool.share_waiters.fetch_add(1, Ordering::AcqRel);
            let _waiter = ShareWaiter(pool);
            loop {
                let returned = pool.returned.notified();
                let mut returned = std::pin::pin!(returned);
                // Registered before the check, so a slot returned right after it wakes us.
                returned.as_mut().enable();
                if !pool.waits_for_more(share) {
                    // Its own slots (and its address's of the reserve) came back meanwhile:
                    // it queues like any session.
                    break;
                }
                match pool.try_take(share) {
                    Ok(slot) => return Ok(slot),
                    Err(TryAcquireError::Closed) => return Err(Error::ShuttingDown),
                    Err(TryAcquireError::NoPermits) => returned.await,
                }
            }
        }
        let permit = match pool.permits.acquire().await {
            Ok(permit) => permit,
            Err(_closed) => return Err(Error::ShuttingDown),
        };
        // Its session took a slot while it queued (a burst of a new session queues whole,
        // each request holding none when it began to wait): a slot of the reserve is not
        // for it. Given back, to the next in the queue, and it waits as its session's
        // other requests do. (Kept, a burst that met a full pool took the whole reserve.)
        if pool.permits.available_permits() < pool.reserve && pool.waits_for_more(share) {
            drop(permit);
            continue;
        }
        return Ok(Slot::new(pool, permit, share));
    }
}

/// Counts a request waiting for more than the reserve to be free while it lives.
struct ShareWaiter<'p>(&'p Pool);

impl Drop for ShareWaiter<'_> {
    fn drop(&mut self) {
        self.0.share_waiters.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The work's output; or the deadline passed; or (2026-07-28) it asked for input it has no
/// answer to. The work is polled first, so every ask it reaches in one poll is recorded
/// before the request is answered with them.
async fn before_deadline<F: Future + Unpin>(
    work: F,
    clock: &RequestContext,
    rounds: Option<&Rounds>,
) -> Ended<F::Output> {
    let input_needed = async {
        match rounds {
            Some(rounds) => rounds.input_needed().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        biased;
        outcome = work => Ended::Done(outcome),
        () = input_needed => Ended::InputNeeded,
        () = clock.deadline_expired() => Ended::TimedOut,
    }
}
