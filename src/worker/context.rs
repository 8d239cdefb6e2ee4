//! The handle a tool gets: report progress, log to the client, observe cancellation, and
//! know the session's negotiated version and the client's capabilities.
//!
//! Progress is throttled here (at most one report per `progress.min_interval_ms`, and only
//! strictly increasing values), so the session receives a bounded stream; each report that
//! goes out also extends the request's deadline, up to the hard maximum.

use super::{SessionInbox, WorkerEvent};
use crate::jsonrpc::RequestId;
use crate::mcp::{LogLevel, ProtocolVersion};
use serde_json::Value;
use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a tool may know about the session that called it.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    pub protocol_version: ProtocolVersion,
    pub client_capabilities: Arc<Value>,
}

/// Set when the request is cancelled (or timed out). Futures are dropped on cancellation
/// anyway; this is for work handed to other threads.
#[derive(Debug, Clone, Default)]
pub struct CancelFlag(Arc<AtomicBool>);

impl CancelFlag {
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    pub(super) fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A request's deadline: `timeout` from start, moved forward by progress, never past
/// `start + hard_max`.
#[derive(Debug)]
pub(super) struct Deadline {
    at: Cell<Instant>,
    hard: Instant,
    extension: Duration,
}

impl Deadline {
    pub(super) fn new(timeout: Duration, hard_max: Duration) -> Self {
        let now = Instant::now();
        let hard = now + hard_max.max(timeout);
        Self {
            at: Cell::new(now + timeout),
            hard,
            extension: timeout,
        }
    }

    fn extend(&self) {
        let proposed = (Instant::now() + self.extension).min(self.hard);
        if proposed > self.at.get() {
            self.at.set(proposed);
        }
    }

    /// Resolves once the (possibly extended) deadline has passed.
    async fn expired(&self) {
        loop {
            let at = self.at.get();
            tokio::time::sleep_until(at.into()).await;
            if Instant::now() >= self.at.get() {
                return;
            }
        }
    }
}

#[derive(Clone)]
pub struct ToolContext {
    inner: Rc<Inner>,
}

struct Inner {
    id: RequestId,
    session: SessionInbox,
    wants_progress: bool,
    min_interval: Duration,
    last_progress: Cell<Option<(Instant, f64)>>,
    deadline: Deadline,
    cancel: CancelFlag,
    session_info: SessionInfo,
}

impl ToolContext {
    pub(super) fn new(
        id: RequestId,
        session: SessionInbox,
        wants_progress: bool,
        min_interval: Duration,
        deadline: Deadline,
        cancel: CancelFlag,
        session_info: SessionInfo,
    ) -> Self {
        Self {
            inner: Rc::new(Inner {
                id,
                session,
                wants_progress,
                min_interval,
                last_progress: Cell::new(None),
                deadline,
                cancel,
                session_info,
            }),
        }
    }

    /// Reports progress. Does nothing when the caller sent no progress token; drops values
    /// that do not increase, and reports closer than the minimum interval to the last one.
    pub fn report_progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let inner = &self.inner;
        if !inner.wants_progress || !progress.is_finite() {
            return;
        }
        let now = Instant::now();
        if let Some((at, last)) = inner.last_progress.get() {
            if progress <= last || now.duration_since(at) < inner.min_interval {
                return;
            }
        }
        inner.last_progress.set(Some((now, progress)));
        inner.deadline.extend();
        inner.session.do_send(WorkerEvent::Progress {
            id: inner.id.clone(),
            progress,
            total,
            message: message.map(str::to_owned),
        });
    }

    /// Sends a log line to the client, if the session's level lets it through.
    pub fn log(&self, level: LogLevel, data: Value) {
        self.inner.session.do_send(WorkerEvent::Log {
            id: self.inner.id.clone(),
            level,
            data,
        });
    }

    /// Resolves once the request's (possibly extended) deadline has passed.
    pub(super) async fn deadline_expired(&self) {
        self.inner.deadline.expired().await;
    }

    pub fn cancel_flag(&self) -> CancelFlag {
        self.inner.cancel.clone()
    }

    pub fn is_cancelled(&self) -> bool {
        self.inner.cancel.is_set()
    }

    pub fn session(&self) -> &SessionInfo {
        &self.inner.session_info
    }
}
