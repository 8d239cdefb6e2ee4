//! The protocol core of one connection, independent of how frames travel: it takes text
//! frames and worker events in, and writes text frames out through a [`Transport`]. The
//! WebSocket actor (`transport::ws`) and the in-memory actor (`transport::memory`) both
//! drive this same core.
//!
//! It owns the session's lifecycle (awaiting `initialize`, then ready with the negotiated
//! version and the client's capabilities), its log level, the map of requests in flight
//! (each in a worker actor), and the batches still being collected. A worker's result or
//! progress for an id that is no longer in flight (cancelled, or the session is gone) is
//! dropped here, which is what makes "no response after cancel" hold.

mod dispatch;

use crate::jsonrpc::{
    self, decode, encode_batch, encode_error, encode_notification, encode_result, Decoded,
    Notification, RequestId,
};
use crate::mcp::Error;
use crate::mcp::{
    notifications, CallToolParams, CancelledParams, Implementation, LogLevel, LoggingMessageParams,
    ProgressParams, ProgressToken, ProtocolVersion,
};
use crate::shared::Shared;
use crate::worker::{Cancel, RequestWorker, SessionInbox, WorkerEvent};
use actix::Addr;
use serde_json::Value;
use std::collections::{hash_map, HashMap};

use std::sync::Arc;
use std::time::Instant;

type FastHash = foldhash::fast::RandomState;

/// Messages as this server decodes them: `tools/call` params parsed in the envelope's pass.
type Entry<'a> = jsonrpc::Entry<'a, CallToolParams<'a>>;
type Request<'a> = jsonrpc::Request<'a, CallToolParams<'a>>;

/// What carries the session's frames out. Implemented by each transport actor's context.
pub trait Transport {
    fn send_text(&mut self, frame: String);
}

pub struct Session {
    shared: Arc<Shared>,
    /// Server-unique, for logs.
    id: u64,
    phase: Phase,
    log_level: LogLevel,
    /// Bounded by `max_in_flight_per_session`, so a fast hasher is safe from flooding.
    in_flight: HashMap<RequestId, InFlight, FastHash>,
    batches: HashMap<u64, PendingBatch, FastHash>,
    next_batch: u64,
    /// Set on shutdown: no new requests, in-flight ones may finish.
    draining: bool,
    /// Where this session's workers send their events: the transport actor's address, given
    /// once the actor has started (see [`Session::attach`]).
    inbox: Option<SessionInbox>,
}

enum Phase {
    AwaitingInit,
    Ready(Negotiated),
}

/// What `initialize` settled for this session.
struct Negotiated {
    version: ProtocolVersion,
    client_capabilities: Arc<Value>,
    client_info: Implementation,
}

/// A request running in a worker.
struct InFlight {
    worker: Addr<RequestWorker>,
    progress_token: Option<ProgressToken>,
    /// The batch whose response array this request's response joins.
    batch: Option<u64>,
}

/// A batch answered once all its requests are done.
struct PendingBatch {
    pending: usize,
    responses: Vec<String>,
}

/// How a request was answered.
enum Reply {
    Now(String),
    /// A worker runs it; its response comes as a `WorkerEvent::Finished`.
    Later,
    Silent,
}

impl Session {
    pub fn new(shared: Arc<Shared>, id: u64) -> Self {
        let log_level =
            LogLevel::parse(&shared.settings.logging.client_level).unwrap_or(LogLevel::Info);
        Self {
            shared,
            id,
            phase: Phase::AwaitingInit,
            log_level,
            in_flight: HashMap::default(),
            batches: HashMap::default(),
            next_batch: 0,
            draining: false,
            inbox: None,
        }
    }

    /// Gives the session its actor's address, for its workers' events. Called from the
    /// transport actor's `started`, before any frame reaches the session.
    pub fn attach(&mut self, inbox: SessionInbox) {
        self.inbox = Some(inbox);
    }

    /// Handles one complete text message: a single JSON-RPC message or a batch.
    pub fn on_text(&mut self, text: &str, tx: &mut dyn Transport) {
        match decode::<CallToolParams<'_>>(text, self.shared.settings.limits.max_batch_len) {
            Decoded::Rejected(error) => tx.send_text(encode_error(None, &error.to_object())),
            Decoded::Single(entry) => {
                if let Reply::Now(frame) = self.on_entry(entry, None, tx) {
                    tx.send_text(frame);
                }
            }
            Decoded::Batch(entries) => self.on_batch(entries, tx),
        }
    }

    /// Entries run concurrently (inline ones answer at once, others start workers); the
    /// array goes out when the last one is done, and not at all if none needs an answer.
    ///
    /// The batch is registered before its first entry runs, holding one count for the loop
    /// itself, so an entry that settles another at once (a cancel of a request earlier in the
    /// same batch) finds it; the loop's own count is released last, the same way.
    fn on_batch(&mut self, entries: Vec<Entry<'_>>, tx: &mut dyn Transport) {
        let batch = self.next_batch;
        self.next_batch += 1;
        self.batches.insert(
            batch,
            PendingBatch {
                pending: 1,
                responses: Vec::new(),
            },
        );
        for entry in entries {
            let reply = self.on_entry(entry, Some(batch), tx);
            let pending = self
                .batches
                .get_mut(&batch)
                .expect("the loop's own count keeps its batch registered");
            match reply {
                Reply::Now(frame) => pending.responses.push(frame),
                Reply::Later => pending.pending += 1,
                Reply::Silent => {}
            }
        }
        self.batch_entry_done(batch, None, tx);
    }

    fn on_entry(&mut self, entry: Entry<'_>, batch: Option<u64>, tx: &mut dyn Transport) -> Reply {
        match entry {
            Entry::Request(request) => self.on_request(request, batch),
            Entry::Notification(notification) => {
                self.on_notification(notification, tx);
                Reply::Silent
            }
            Entry::Response => {
                tracing::debug!(
                    session = self.id,
                    "dropping a response: this server sends no requests"
                );
                Reply::Silent
            }
            Entry::Invalid { id, error } => {
                Reply::Now(encode_error(id.as_ref(), &error.to_object()))
            }
        }
    }

    fn on_request(&mut self, request: Request<'_>, batch: Option<u64>) -> Reply {
        self.shared.metrics.requests.inc();
        let span = tracing::debug_span!("request", session = self.id, id = %request.id, method = %request.method);
        let _entered = span.enter();
        // Timed only when the span is logged: a clock read per request is measurable.
        let started = tracing::enabled!(tracing::Level::DEBUG).then(Instant::now);
        let outcome = if self.in_flight.contains_key(&request.id) {
            Err(Error::DuplicateRequestId)
        } else if self.draining {
            Err(Error::ShuttingDown)
        } else {
            match self.route(&request, batch) {
                Ok(dispatch::Route::Inline(result)) => Ok(Some(result)),
                Ok(dispatch::Route::Worker(call)) => self
                    .start_worker(request.id.clone(), call, batch)
                    .map(|()| None),
                Err(error) => Err(error),
            }
        };
        if let Some(started) = started {
            tracing::debug!(
                elapsed_us = started.elapsed().as_micros() as u64,
                outcome = match &outcome {
                    Ok(Some(_)) => "ok",
                    Ok(None) => "started worker",
                    Err(_) => "error",
                },
                "request handled"
            );
        }
        match outcome {
            Ok(Some(result)) => Reply::Now(encode_result(&request.id, &result)),
            Ok(None) => Reply::Later,
            Err(error) => Reply::Now(encode_error(Some(&request.id), &error.to_wire())),
        }
    }

    fn on_notification(&mut self, notification: Notification<'_>, tx: &mut dyn Transport) {
        match notification.method.as_ref() {
            // Requests are served once `initialize` is answered; the server sends no requests
            // of its own that would have to wait for this.
            notifications::INITIALIZED => {
                tracing::debug!(session = self.id, "notifications/initialized received")
            }
            notifications::CANCELLED => {
                match crate::mcp::parse_object::<CancelledParams<'_>>(notification.params) {
                    Ok(params) => match RequestId::from_raw(params.request_id) {
                        Some(id) => self.cancel(&id, tx),
                        None => tracing::debug!(
                            session = self.id,
                            "cancel with an invalid requestId; ignored"
                        ),
                    },
                    Err(reason) => {
                        tracing::debug!(session = self.id, %reason, "malformed cancel; ignored")
                    }
                }
            }
            other => tracing::debug!(session = self.id, method = other, "notification ignored"),
        }
    }

    /// Stops a request in flight; no response will be sent for it. Unknown or finished ids
    /// are ignored, as the spec asks (the cancel may cross the response on the wire).
    fn cancel(&mut self, id: &RequestId, tx: &mut dyn Transport) {
        let Some(entry) = self.in_flight.remove(id) else {
            tracing::debug!(session = self.id, id = %id, "cancel for a request not in flight; ignored");
            return;
        };
        entry.worker.do_send(Cancel);
        self.shared.metrics.workers.dec();
        self.shared.metrics.cancelled.inc();
        tracing::debug!(session = self.id, id = %id, "cancelled");
        if let Some(batch) = entry.batch {
            self.batch_entry_done(batch, None, tx);
        }
    }

    pub fn on_worker_event(&mut self, event: WorkerEvent, tx: &mut dyn Transport) {
        match event {
            WorkerEvent::Finished { id, outcome } => {
                let Some(entry) = self.in_flight.remove(&id) else {
                    tracing::debug!(session = self.id, id = %id, "dropping the result of a request no longer in flight");
                    return;
                };
                self.shared.metrics.workers.dec();
                let frame = match outcome {
                    Ok(frame) => frame,
                    Err(error) => encode_error(Some(&id), &error.to_wire()),
                };
                match entry.batch {
                    None => tx.send_text(frame),
                    Some(batch) => self.batch_entry_done(batch, Some(frame), tx),
                }
            }
            WorkerEvent::Progress {
                id,
                progress,
                total,
                message,
            } => {
                // Only for a request still in flight that asked for progress: never after
                // its response, never after a cancel.
                if let Some(InFlight {
                    progress_token: Some(token),
                    ..
                }) = self.in_flight.get(&id)
                {
                    let params = ProgressParams {
                        progress_token: token.as_raw(),
                        progress,
                        total,
                        message: message.as_deref(),
                    };
                    tx.send_text(encode_notification(notifications::PROGRESS, &params));
                }
            }
            WorkerEvent::Log { id, level, data } => {
                if level >= self.log_level && self.in_flight.contains_key(&id) {
                    let params = LoggingMessageParams {
                        level,
                        logger: Some("mcp-ws"),
                        data: &data,
                    };
                    tx.send_text(encode_notification(notifications::MESSAGE, &params));
                }
            }
        }
    }

    fn batch_entry_done(&mut self, batch: u64, frame: Option<String>, tx: &mut dyn Transport) {
        let hash_map::Entry::Occupied(mut slot) = self.batches.entry(batch) else {
            return;
        };
        let pending = slot.get_mut();
        pending.pending -= 1;
        pending.responses.extend(frame);
        if pending.pending == 0 {
            let done = slot.remove();
            if !done.responses.is_empty() {
                tx.send_text(encode_batch(&done.responses));
            }
        }
    }

    /// Shutdown began: refuse new requests, let those in flight finish.
    pub fn begin_drain(&mut self) {
        self.draining = true;
    }

    pub fn has_work_in_flight(&self) -> bool {
        !self.in_flight.is_empty()
    }

    /// Cancels every request in flight (the connection closed, or the grace ran out), each
    /// the way a client's cancel would: a batch cut short still sends the answers it
    /// collected. (After a disconnect those frames go nowhere, which is harmless.)
    pub fn cancel_all(&mut self, tx: &mut dyn Transport) {
        let ids: Vec<RequestId> = self.in_flight.keys().cloned().collect();
        for id in ids {
            self.cancel(&id, tx);
        }
    }
}
