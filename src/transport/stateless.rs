//! A 2026-07-28 POST served where it arrives: its session core runs in the request's own
//! handler and, once the answer streams, in the response body, fed by its inbox, with no
//! actor of its own.
//!
//! Such a request carries its whole state, and nothing reaches it but its own workers'
//! events, the change bus (a `subscriptions/listen`) and shutdown: a host actor (its context,
//! mailbox, task and shutdown registration, made and torn down per request) cost more than
//! the request it served. The core is the same [`Session`] every other transport
//! hosts; only its outlet is this exchange's.
//!
//! Dropping the exchange before its answer (the client closed its connection, or the
//! answer's stream) cancels what it runs: under this revision, that is how a client cancels
//! a request over HTTP.

use crate::perimeter::Admission;
use crate::protocol::mcp::Error;
use crate::session::shared::{SessionSlot, Shared};
use crate::session::{Intake, Message, Outlet, ReadRequest, Route, Session};
use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// The exchange number of the one request a stateless core serves.
const EXCHANGE: u64 = 1;

/// What a stateless POST hands its core: the single request it should be, read (its
/// headers were checked against it), or whatever else the client sent, for the core to
/// answer with the error it deserves.
pub enum Body<'a> {
    /// One request, its params' head read once by the transport.
    Request(ReadRequest<'a>),
    /// Anything else, decoded.
    Message(Message<'a>),
}

/// How a stateless POST is answered first.
pub enum FirstReply {
    /// Over without an answer, and none was due (nothing in it was a request): 202.
    Accepted,
    /// Cancelled unanswered when the server's shutdown grace ran out: 503 with -32004.
    ShutDown,
    /// The answer came first: a JSON body, with its HTTP status.
    Json {
        /// The answer.
        frame: String,
        /// 200, or what a 2026-07-28 error's binding asks for.
        status: u16,
    },
    /// Something came before the answer, or nothing came in time: the rest streams, answer
    /// last ([`StatelessExchange::next_frame`]).
    Stream(Box<StatelessExchange>),
}

/// One 2026-07-28 request in flight over HTTP; see the module docs.
pub struct StatelessExchange {
    core: Session,
    out: ExchangeOutlet,
    shared: Arc<Shared>,
    /// Set once the exchange first waits: the server's shutdown signal, and the end of the
    /// grace once it came.
    shutdown: Option<ShutdownWatch>,
    /// Whether the answer goes as a stream (headers sent): a request cut by the end of the
    /// grace is then answered in it, no longer with a 503.
    streaming: bool,
    /// Counts the request against the session cap while it runs.
    _slot: SessionSlot,
}

impl StatelessExchange {
    /// Starts `body` (one 2026-07-28 request, or whatever a client sent as one, decoded
    /// by [`Session::decode`] for `admission`) on a core of its own, on the current thread.
    pub fn start(
        shared: Arc<Shared>,
        slot: SessionSlot,
        admission: Admission,
        body: Body<'_>,
    ) -> Self {
        let mut core = Session::stateless(shared.clone(), slot.id(), admission);
        let mut out = ExchangeOutlet::default();
        let intake = match body {
            Body::Request(read) => core.on_read_request(read, EXCHANGE, &mut out),
            Body::Message(message) => core.on_message(message, EXCHANGE, &mut out),
        };
        if intake == Intake::Silent {
            out.closed = true;
        }
        // Work that finished in its first poll left its outcome in the inbox already.
        core.on_inbox(&mut out);
        Self {
            core,
            out,
            shared,
            shutdown: None,
            streaming: false,
            _slot: slot,
        }
    }

    /// Waits for the first thing to tell the client, and says how to answer: the answer
    /// alone as JSON, or a stream when something comes before it, or when nothing has
    /// come within `stream_after`. A pending JSON body never shows that its client went
    /// away (the server does not read the connection meanwhile); a stream's keep-alive
    /// comments do, so a long request is still cancelled by its client's leaving.
    pub async fn first_reply(mut self, stream_after: Duration) -> FirstReply {
        if self.out.frames.is_empty()
            && !self.out.is_over()
            && tokio::time::timeout(stream_after, self.wait())
                .await
                .is_err()
        {
            self.streaming = true;
            return FirstReply::Stream(Box::new(self));
        }
        match self.out.frames.len() {
            0 if self.shutdown.as_ref().is_some_and(|s| s.cut) => FirstReply::ShutDown,
            0 => FirstReply::Accepted,
            1 if self.out.answered => match self.out.frames.pop_front() {
                Some(frame) => FirstReply::Json {
                    frame,
                    status: self.out.status,
                },
                None => FirstReply::Accepted,
            },
            _ => {
                self.streaming = true;
                FirstReply::Stream(Box::new(self))
            }
        }
    }

    /// The next frame of a streamed answer, or `None` once the answer went.
    pub async fn next_frame(&mut self) -> Option<String> {
        self.wait().await;
        self.out.frames.pop_front()
    }

    /// Waits until a frame is ready or the exchange is over: handles the inbox each time it
    /// is woken, begins the drain when the server shuts down, and cancels what still runs
    /// when the grace has passed.
    async fn wait(&mut self) {
        let Self {
            core,
            out,
            shared,
            shutdown,
            streaming,
            ..
        } = self;
        while out.frames.is_empty() && !out.is_over() {
            let shutdown = shutdown.get_or_insert_with(|| ShutdownWatch::new(shared));
            if shutdown.deadline.is_none() && *shutdown.signal.borrow_and_update() {
                // Listens end with their result; requests in flight get the grace.
                shutdown.deadline = Some(Instant::now() + shutdown.grace);
                core.begin_drain(out);
                continue;
            }
            let deadline = shutdown.deadline;
            tokio::select! {
                biased;
                () = poll_fn(|task| {
                    // Registered first: whatever is posted after the drain wakes us again.
                    core.inbox().register(task.waker());
                    core.on_inbox(out);
                    if out.frames.is_empty() && !out.is_over() {
                        Poll::Pending
                    } else {
                        Poll::Ready(())
                    }
                }) => {}
                // Looked at on the next turn; an error (the server is gone) is a shutdown too.
                changed = shutdown.signal.changed(), if deadline.is_none() => {
                    if changed.is_err() {
                        shutdown.deadline = Some(Instant::now());
                    }
                }
                () = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)),
                    if deadline.is_some() =>
                {
                    if *streaming {
                        // The answer's stream is open: the request gets its answer in it.
                        core.answer_all_with(&Error::ShuttingDown, out);
                    } else {
                        core.cancel_all(out);
                        shutdown.cut = true;
                    }
                    out.closed = true;
                }
            }
        }
    }
}

impl Drop for StatelessExchange {
    fn drop(&mut self) {
        if !self.out.is_over() {
            // The client went away before the answer: that cancels the request.
            self.core.cancel_all(&mut self.out);
        }
    }
}

/// The server's shutdown, as an exchange that waits sees it.
struct ShutdownWatch {
    signal: watch::Receiver<bool>,
    grace: Duration,
    deadline: Option<Instant>,
    /// The grace ran out: what still ran was cancelled.
    cut: bool,
}

impl ShutdownWatch {
    fn new(shared: &Shared) -> Self {
        Self {
            signal: shared.shutdown_signal(),
            grace: Duration::from_millis(shared.settings.shutdown.grace_ms),
            deadline: None,
            cut: false,
        }
    }
}

/// Collects what the core sends for the one exchange, in order, until its answer.
struct ExchangeOutlet {
    frames: VecDeque<String>,
    /// The answer was sent.
    answered: bool,
    /// Over without an answer (nothing to answer, or cancelled).
    closed: bool,
    /// The HTTP status of the answer.
    status: u16,
}

impl Default for ExchangeOutlet {
    fn default() -> Self {
        Self {
            frames: VecDeque::new(),
            answered: false,
            closed: false,
            status: 200,
        }
    }
}

impl ExchangeOutlet {
    fn is_over(&self) -> bool {
        self.answered || self.closed
    }
}

impl Outlet for ExchangeOutlet {
    fn send(&mut self, frame: String, route: Route) {
        // Nothing follows the answer; and a core without a session has no session stream
        // for `Route::Session` messages to go on.
        if self.is_over() || route == Route::Session {
            return;
        }
        self.answered = matches!(route, Route::Answer(_));
        self.frames.push_back(frame);
    }

    fn close(&mut self, _exchange: u64) {
        self.closed = true;
    }

    fn status(&mut self, _exchange: u64, status: u16) {
        self.status = status;
    }
}
