//! A session's inbox: the queue through which its requests' workers and tool contexts talk
//! back to it (progress, log lines, client requests, the final outcome), and the marks the
//! change bus leaves on it (list changes, updated resources).
//!
//! A session and everything it started live on one thread (its actix arbiter), so the inbox
//! is a plain queue and a waker behind an `Rc`: posting is a push and, if the session sleeps,
//! a wake. It belongs to the session core, not to the actor hosting it, so when a session
//! moves to another host (its socket dropped and it waits for a resume), its inbox, with
//! every event not yet handled, in order, goes with it.
//!
//! The queue is fed only by producers bounded at their source (at most
//! `max_in_flight_per_session` workers, each with throttled progress and log lines, and
//! exactly one outcome; at most `max_in_flight_per_session` requests to the client
//! outstanding, counted here). Those rates still add up while the session is not drained (a
//! WebSocket client that stops reading stalls its session), so notifications (progress, log
//! lines) are also capped in the queue, in number (`limits.max_queued_notifications`) and in
//! the bytes of their data and messages (`limits.max_queued_notification_bytes`): past either
//! they are dropped, and counted. Outcomes and client requests are never dropped; their
//! number is bounded at their source, and an outcome's size by `limits.max_message_bytes`.

use crate::protocol::jsonrpc::RequestId;
use crate::protocol::mcp::{Error, LogLevel};
use serde_json::value::RawValue;
use serde_json::Value;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::task::Waker;
use tokio::sync::oneshot;

/// What a session's requests tell it.
#[derive(Debug)]
pub enum SessionEvent {
    /// A progress report of request `id` (already throttled and increasing).
    Progress {
        id: RequestId,
        /// Which request of that id (see [`RequestSerial`]).
        serial: RequestSerial,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    },
    /// A log line of request `id`, for `notifications/message`.
    Log {
        id: RequestId,
        /// Which request of that id (see [`RequestSerial`]).
        serial: RequestSerial,
        level: LogLevel,
        logger: Option<String>,
        /// The line's data as JSON, written by the tool's context: its size is known while
        /// it waits in the queue, and it is written once.
        data: Box<RawValue>,
    },
    /// A tool asks the client something (`roots/list`, `sampling/createMessage`,
    /// `elicitation/create`).
    ClientRequest(ClientRequest),
    /// A client request's asker stopped waiting (its tool finished, was cancelled, or timed
    /// out waiting): forget it, and tell the client.
    ClientRequestAbandoned {
        server_id: u64,
        reason: &'static str,
    },
    /// The last event of every request that ran in a worker: its response frame, or the error
    /// to answer with.
    Finished {
        id: RequestId,
        /// Which request of that id (see [`RequestSerial`]).
        serial: RequestSerial,
        outcome: Result<String, Error>,
    },
}

/// Which of a session's requests an event is of, beside its id: a client may send an id
/// again once its request is over (cancelled), and what the cancelled one's worker or its
/// tool still posts must not be taken for the new one's (its result sent as the new one's
/// answer). Counted by the session, one per request it starts; 0 for a context that posts
/// to no session.
pub type RequestSerial = u64;

/// A request from the server to the client, made by a tool.
#[derive(Debug)]
pub struct ClientRequest {
    /// The id the server gives it on the wire (unique in the session).
    pub server_id: u64,
    /// The request of the tool that asks.
    pub on_behalf_of: RequestId,
    /// Which request of that id.
    pub serial: RequestSerial,
    pub method: &'static str,
    pub params: Value,
    /// Where the client's answer goes: its `result`, or its error object.
    pub reply: oneshot::Sender<Result<Value, ClientError>>,
}

/// A client's error response to a server request, or why there will be none.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientError {
    /// The client answered with a JSON-RPC error.
    Rejected {
        code: i64,
        message: String,
        data: Option<Value>,
    },
    /// The session ended (or its connection dropped) before an answer came.
    Disconnected,
}

/// Which lists changed since the session last looked (one bit each).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Changes(u8);

impl Changes {
    pub const TOOLS: Self = Self(1);
    pub const RESOURCES: Self = Self(2);
    pub const PROMPTS: Self = Self(4);
    /// Every list.
    pub const ALL: Self = Self(7);
    /// Each list and its name in MCP (`tools/list`, `notifications/tools/list_changed`, …).
    pub const NAMED: [(Self, &'static str); 3] = [
        (Self::TOOLS, "tools"),
        (Self::RESOURCES, "resources"),
        (Self::PROMPTS, "prompts"),
    ];

    /// The list named `name` (`"tools"`, `"resources"`, `"prompts"`).
    pub fn named(name: &str) -> Option<Self> {
        Self::NAMED
            .iter()
            .find(|(_, named)| *named == name)
            .map(|(list, _)| *list)
    }

    /// The bits, to keep in an atomic.
    pub fn bits(self) -> u8 {
        self.0
    }

    /// From [`bits`](Self::bits) (bits beyond the three lists dropped).
    pub fn from_bits(bits: u8) -> Self {
        Self(bits & Self::ALL.0)
    }

    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0 && other.0 != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }
}

impl SessionEvent {
    /// For what the client can do without (a progress report: a later one supersedes it; a
    /// log line), the bytes it holds that a tool chose (its message, its data and logger);
    /// `None` for the rest. Only notifications are dropped when the queue is full.
    fn notification_bytes(&self) -> Option<usize> {
        match self {
            Self::Progress { message, .. } => Some(message.as_ref().map_or(0, String::len)),
            Self::Log { logger, data, .. } => {
                Some(data.get().len() + logger.as_ref().map_or(0, String::len))
            }
            _ => None,
        }
    }
}

/// What was dropped at the session's sources since it last looked (`Inbox::take_dropped`,
/// for tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dropped {
    /// Log lines over their request's budget (`limits.log_lines_per_second`).
    pub log_lines: u64,
    /// Notifications over `limits.max_queued_notifications` or
    /// `limits.max_queued_notification_bytes`.
    pub queued_notifications: u64,
    /// Requests to the client refused by `limits.max_in_flight_per_session`.
    pub client_requests: u64,
}

/// A session's inbox. See the module docs.
///
/// Every session holds one, in an `Rc`: at 296 B it fits the allocator's 320 B class with
/// the `Rc`'s counts (a std hasher in its two maps, or an `Option` limit, took it to the
/// 384 B class: benches/README.md, "An idle session's actor in 1 KiB").
#[derive(Debug)]
pub struct Inbox {
    events: RefCell<VecDeque<SessionEvent>>,
    /// Notifications among `events`, and the bytes of their data and messages. (Numbers of
    /// 32 bits: four of them take the room two `usize`s took, see above.)
    queued_notifications: Cell<u32>,
    queued_notification_bytes: Cell<u32>,
    max_queued_notifications: u32,
    max_queued_notification_bytes: u32,
    dropped: Cell<Dropped>,
    waker: RefCell<Option<Waker>>,
    changes: Cell<Changes>,
    /// Resource URIs of interest with an update not yet handled.
    updated: RefCell<Vec<String>>,
    /// The resource URIs the session wants updates of, each with the number of its
    /// subscriptions that want it (a session-era subscription, `subscriptions/listen`
    /// filters).
    interests: RefCell<std::collections::HashMap<String, u32, crate::FastHash>>,
    /// The tasks the session's listen streams follow, each with the number of streams and
    /// the last status the session was given of it (see [`mark_task_reread`](Self::mark_task_reread)).
    task_interests: RefCell<std::collections::HashMap<String, Followed, crate::FastHash>>,
    /// The node's bus subscription was down a while: the followed tasks' records are to be
    /// read again (see [`mark_tasks_missed`](Self::mark_tasks_missed)).
    tasks_missed: Cell<bool>,
    /// The latest stored status of each followed task not yet sent.
    task_notes: RefCell<Vec<std::sync::Arc<TaskNote>>>,
    next_server_id: Cell<u64>,
    /// Requests to the client that tools are waiting for.
    client_requests: Cell<usize>,
    /// How many of those may be outstanding at once (`usize::MAX`, no limit, for test
    /// contexts).
    client_request_limit: Cell<usize>,
    /// The least severe level the client wants as `notifications/message`; contexts drop
    /// lines below it before they are queued.
    log_level: Cell<Option<LogLevel>>,
    /// Set when the session is gone: what is posted after that is dropped at once.
    closed: Cell<bool>,
}

impl Default for Inbox {
    /// An inbox with no cap on queued notifications (for tests, and task runners, whose
    /// contexts send none).
    fn default() -> Self {
        Self::new(usize::MAX, u64::MAX)
    }
}

impl Inbox {
    /// An inbox holding at most `max_queued_notifications` notifications at once, whose
    /// data and messages come to at most `max_queued_notification_bytes` (each beyond 32 bits
    /// taken as no cap).
    pub fn new(max_queued_notifications: usize, max_queued_notification_bytes: u64) -> Self {
        Self {
            events: RefCell::default(),
            queued_notifications: Cell::new(0),
            queued_notification_bytes: Cell::new(0),
            max_queued_notifications: u32::try_from(max_queued_notifications).unwrap_or(u32::MAX),
            max_queued_notification_bytes: u32::try_from(max_queued_notification_bytes)
                .unwrap_or(u32::MAX),
            dropped: Cell::default(),
            waker: RefCell::default(),
            changes: Cell::default(),
            updated: RefCell::default(),
            interests: RefCell::default(),
            task_interests: RefCell::default(),
            task_notes: RefCell::default(),
            tasks_missed: Cell::new(false),
            next_server_id: Cell::new(0),
            client_requests: Cell::new(0),
            client_request_limit: Cell::new(usize::MAX),
            log_level: Cell::new(None),
            closed: Cell::new(false),
        }
    }

    /// Posts an event; wakes the session if it sleeps. A notification is dropped (and
    /// counted) when the queue holds its maximum of them already, or it would take the
    /// queue's notifications past their maximum of bytes.
    pub fn post(&self, event: SessionEvent) {
        if self.closed.get() {
            return;
        }
        if let Some(bytes) = event.notification_bytes() {
            let queued = self.queued_notifications.get();
            // Over 4 GiB is over any limit the counter can hold: dropped as well.
            let bytes = u32::try_from(bytes).unwrap_or(u32::MAX);
            let queued_bytes = self.queued_notification_bytes.get().saturating_add(bytes);
            if queued >= self.max_queued_notifications
                || queued_bytes > self.max_queued_notification_bytes
            {
                self.count(|d| d.queued_notifications += 1);
                return;
            }
            self.queued_notifications.set(queued + 1);
            self.queued_notification_bytes.set(queued_bytes);
        }
        self.events.borrow_mut().push_back(event);
        self.wake();
    }

    /// The next event, oldest first.
    pub fn take_event(&self) -> Option<SessionEvent> {
        let event = self.events.borrow_mut().pop_front()?;
        if let Some(bytes) = event.notification_bytes() {
            self.queued_notifications
                .set(self.queued_notifications.get() - 1);
            // As counted when posted; saturating as the count did (an inbox without a cap
            // can be posted more than 32 bits count).
            let bytes = u32::try_from(bytes).unwrap_or(u32::MAX);
            self.queued_notification_bytes
                .set(self.queued_notification_bytes.get().saturating_sub(bytes));
        }
        Some(event)
    }

    /// Counts a log line its request's budget dropped.
    pub fn count_dropped_log_line(&self) {
        self.count(|d| d.log_lines += 1);
    }

    /// Counts a request to the client refused by its request's cap.
    pub fn count_refused_client_request(&self) {
        self.count(|d| d.client_requests += 1);
    }

    /// What was dropped since the last call.
    #[cfg(any(test, feature = "testing"))]
    pub fn take_dropped(&self) -> Dropped {
        self.dropped.take()
    }

    /// Adds what was dropped since the last call to `limited`.
    pub fn flush_dropped(&self, metrics: &crate::observe::metrics::Metrics) {
        let dropped = self.dropped.get();
        if dropped != Dropped::default() {
            self.dropped.set(Dropped::default());
            metrics.dropped.log_lines.add(dropped.log_lines);
            metrics
                .dropped
                .queued_notifications
                .add(dropped.queued_notifications);
            metrics
                .rejections
                .client_requests
                .add(dropped.client_requests);
        }
    }

    fn count(&self, what: impl FnOnce(&mut Dropped)) {
        let mut dropped = self.dropped.get();
        what(&mut dropped);
        self.dropped.set(dropped);
    }

    /// Marks lists as changed; the session sends one `list_changed` per list however many
    /// marks pile up before it looks.
    pub fn mark_changed(&self, changes: Changes) {
        if self.closed.get() {
            return;
        }
        let before = self.changes.get();
        let after = before.union(changes);
        if after != before {
            self.changes.set(after);
            self.wake();
        }
    }

    /// Takes the list changes marked since the last call.
    pub fn take_changes(&self) -> Changes {
        self.changes.replace(Changes::default())
    }

    /// Marks `uri` as updated if the session wants its updates; says whether it did.
    pub fn mark_updated(&self, uri: &str) -> bool {
        if self.closed.get() || !self.interests.borrow().contains_key(uri) {
            return false;
        }
        let mut updated = self.updated.borrow_mut();
        if !updated.iter().any(|u| u == uri) {
            updated.push(uri.to_owned());
        }
        drop(updated);
        self.wake();
        true
    }

    /// Marks every subscribed URI as updated (the fan-out lost track of what changed).
    pub fn mark_all_subscriptions_updated(&self) {
        let all: Vec<String> = self.interests.borrow().keys().cloned().collect();
        for uri in all {
            self.mark_updated(&uri);
        }
    }

    /// Takes the updated URIs marked since the last call.
    pub fn take_updated(&self) -> Vec<String> {
        std::mem::take(&mut self.updated.borrow_mut())
    }

    /// One more subscription of the session wants updates of `uri`.
    pub fn add_interest(&self, uri: &str) {
        *self
            .interests
            .borrow_mut()
            .entry(uri.to_owned())
            .or_insert(0) += 1;
    }

    /// One subscription less wants updates of `uri`.
    pub fn drop_interest(&self, uri: &str) {
        let mut interests = self.interests.borrow_mut();
        if let Some(count) = interests.get_mut(uri) {
            *count -= 1;
            if *count == 0 {
                interests.remove(uri);
                self.updated.borrow_mut().retain(|u| u != uri);
            }
        }
    }

    /// Keeps a task's status for the session if one of its streams follows the task
    /// (replacing an older status of it not yet sent); says whether it did.
    pub fn mark_task(&self, note: &std::sync::Arc<TaskNote>) -> bool {
        self.mark_task_as(note, false)
    }

    /// [`mark_task`](Self::mark_task) for a status read again from the task's record (the
    /// bus was down: its note may have been missed): kept only when it is not the last
    /// status the session was given of the task.
    pub fn mark_task_reread(&self, note: &std::sync::Arc<TaskNote>) -> bool {
        self.mark_task_as(note, true)
    }

    fn mark_task_as(&self, note: &std::sync::Arc<TaskNote>, reread: bool) -> bool {
        if self.closed.get() {
            return false;
        }
        match self.task_interests.borrow_mut().get_mut(&note.id) {
            None => return false,
            // Given already, whole: a status alone would take an `input_required` with new
            // questions for the one given before.
            Some(followed)
                if reread
                    && followed
                        .last
                        .as_ref()
                        .is_some_and(|l| l.fields == note.fields) =>
            {
                return false
            }
            // A status read again may be older than one the bus brought meanwhile: never
            // one after the task's end (review 59: it replaced `completed`, and the stream
            // waited for good).
            Some(followed)
                if reread
                    && followed
                        .last
                        .as_ref()
                        .and_then(|last| last.status.as_deref())
                        .is_some_and(is_final) =>
            {
                return false
            }
            Some(followed) => followed.last = Some(note.clone()),
        }
        let mut notes = self.task_notes.borrow_mut();
        match notes.iter_mut().find(|n| n.id == note.id) {
            Some(older) => *older = note.clone(),
            None => notes.push(note.clone()),
        }
        drop(notes);
        self.wake();
        true
    }

    /// Takes the task statuses kept since the last call.
    pub fn take_task_notes(&self) -> Vec<std::sync::Arc<TaskNote>> {
        std::mem::take(&mut self.task_notes.borrow_mut())
    }

    /// One more stream of the session follows task `id`.
    pub fn add_task_interest(&self, id: &str) {
        self.task_interests
            .borrow_mut()
            .entry(id.to_owned())
            .or_default()
            .streams += 1;
    }

    /// The tasks the session's streams follow.
    pub fn followed_tasks(&self) -> Vec<String> {
        self.task_interests.borrow().keys().cloned().collect()
    }

    /// The node's bus subscription is back after it was down: task statuses may have been
    /// missed meanwhile, and the session reads its followed tasks' records again (when it
    /// follows any).
    pub fn mark_tasks_missed(&self) {
        if self.closed.get() || self.task_interests.borrow().is_empty() {
            return;
        }
        self.tasks_missed.set(true);
        self.wake();
    }

    /// Whether [`mark_tasks_missed`](Self::mark_tasks_missed) was called since the last call.
    pub fn take_tasks_missed(&self) -> bool {
        self.tasks_missed.replace(false)
    }

    /// One stream less follows task `id`.
    pub fn drop_task_interest(&self, id: &str) {
        let mut interests = self.task_interests.borrow_mut();
        if let Some(followed) = interests.get_mut(id) {
            followed.streams -= 1;
            if followed.streams == 0 {
                interests.remove(id);
                self.task_notes.borrow_mut().retain(|n| n.id != id);
            }
        }
    }

    /// The session's log level (`Debug` until set).
    pub fn log_level(&self) -> LogLevel {
        self.log_level.get().unwrap_or(LogLevel::Debug)
    }

    /// Sets the session's log level.
    pub fn set_log_level(&self, level: LogLevel) {
        self.log_level.set(Some(level));
    }

    /// A fresh id for a server → client request.
    /// Starts this session's request ids to its client at `base` (a node's own range, when
    /// copies of one session on several nodes each ask the client things: their ids must not
    /// meet).
    pub fn offset_server_ids(&self, base: u64) {
        self.next_server_id.set(base);
    }

    pub fn next_server_id(&self) -> u64 {
        let id = self.next_server_id.get() + 1;
        self.next_server_id.set(id);
        id
    }

    /// Sets how many requests to the client may be outstanding at once.
    pub fn set_client_request_limit(&self, limit: usize) {
        self.client_request_limit.set(limit);
    }

    /// Counts one more outstanding request to the client, unless the limit is reached (then
    /// `Err(limit)`); each `Ok` is matched by one [`end_client_request`](Self::end_client_request).
    pub fn begin_client_request(&self) -> Result<(), usize> {
        let outstanding = self.client_requests.get();
        let limit = self.client_request_limit.get();
        if outstanding >= limit {
            return Err(limit);
        }
        self.client_requests.set(outstanding + 1);
        Ok(())
    }

    /// A request to the client is no longer waited for.
    pub fn end_client_request(&self) {
        self.client_requests
            .set(self.client_requests.get().saturating_sub(1));
    }

    /// Remembers who to wake; called by the session's host before it drains the inbox.
    pub fn register(&self, waker: &Waker) {
        crate::remember_waker(&mut self.waker.borrow_mut(), waker);
    }

    /// The session is gone: drop what is queued and whatever comes later.
    pub fn close(&self) {
        self.closed.set(true);
        self.events.borrow_mut().clear();
        self.interests.borrow_mut().clear();
        self.queued_notifications.set(0);
        self.queued_notification_bytes.set(0);
        self.updated.borrow_mut().clear();
        self.waker.borrow_mut().take();
    }

    /// Whether the session is gone.
    #[cfg(any(test, feature = "testing"))]
    pub fn is_closed(&self) -> bool {
        self.closed.get()
    }

    fn wake(&self) {
        // Taken, not cloned: one wake per sleep is enough, the host registers again.
        let waker = self.waker.borrow_mut().take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// Whether `status` (a task status's wire name) is one a task ends in: the names of
/// `TaskStatus::is_terminal`'s statuses, which this layer below the cluster's sees only as
/// text (a test of the tasks holds the two together).
pub(crate) fn is_final(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled")
}

/// A task a session's listen streams follow.
#[derive(Debug, Default)]
struct Followed {
    /// How many of its streams follow it.
    streams: u32,
    /// The last note the session was given of it (shared with the bus's copy: no copy made).
    last: Option<std::sync::Arc<TaskNote>>,
}

/// A task's status as stored, for the `subscriptions/listen` streams that follow the task.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TaskNote {
    /// The task's id.
    pub id: String,
    /// The subject of the identity it belongs to: only its streams hear of it.
    pub owner: String,
    /// The tool the task runs: only streams whose credential may use it hear of it. Empty
    /// from a node that did not send it (then only for credentials that may use every tool).
    #[serde(default)]
    pub tool: String,
    /// What `tasks/get` shows of it (the members of a JSON object).
    pub fields: String,
    /// Its status as named on the wire (in `fields` too), to tell a status read again from
    /// one already given; `None` from a node that did not send it. (A name, not the tasks
    /// module's type: the mailbox sits below the cluster layer.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Box<str>>,
}

#[cfg(test)]
mod tests {
    use super::{Inbox, SessionEvent, TaskNote};
    use crate::protocol::jsonrpc::RequestId;
    use serde_json::value::to_raw_value;

    fn progress(message: &str) -> SessionEvent {
        SessionEvent::Progress {
            id: RequestId::from_number(1),
            serial: 1,
            progress: 1.0,
            total: None,
            message: Some(message.to_owned()),
        }
    }

    fn task(status: &str) -> std::sync::Arc<TaskNote> {
        task_with(status, "")
    }

    /// A note of `status` whose fields carry `more` beside it.
    fn task_with(status: &str, more: &str) -> std::sync::Arc<TaskNote> {
        std::sync::Arc::new(TaskNote {
            id: "t".into(),
            owner: "o".into(),
            tool: String::new(),
            fields: format!(r#""status":"{status}"{more}"#),
            status: Some(status.into()),
        })
    }

    /// A note read again is the one given when it is the same whole, not only the same
    /// status: an `input_required` with other questions is new. (Compared by status alone,
    /// it was dropped as given.)
    #[test]
    fn a_task_note_read_again_with_new_questions_is_kept() {
        let inbox = Inbox::new(100, 11);
        inbox.add_task_interest("t");
        let first = r#","inputRequests":{"a":{}}"#;
        assert!(inbox.mark_task(&task_with("input_required", first)));
        assert!(!inbox.mark_task_reread(&task_with("input_required", first)));
        let second = r#","inputRequests":{"b":{}}"#;
        assert!(inbox.mark_task_reread(&task_with("input_required", second)));
    }

    /// A status read again (the bus was down) is kept when the session was not given it,
    /// never over a final one the bus brought meanwhile (the read may be older). (It replaced
    /// `completed`, and the stream waited for good; review 59.)
    #[test]
    fn a_task_status_read_again_never_steps_back_from_the_tasks_end() {
        let inbox = Inbox::new(100, 11);
        inbox.add_task_interest("t");
        assert!(inbox.mark_task(&task("working")));
        assert!(!inbox.mark_task_reread(&task("working")), "given already");
        assert!(inbox.mark_task_reread(&task("input_required")), "not given");
        assert!(inbox.mark_task(&task("completed")));
        assert!(
            !inbox.mark_task_reread(&task("working")),
            "older than the end"
        );
        let notes = inbox.take_task_notes();
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0].status.as_deref(), Some("completed"));
    }

    fn log(data: &str, logger: &str) -> SessionEvent {
        SessionEvent::Log {
            id: RequestId::from_number(1),
            serial: 1,
            level: crate::protocol::mcp::LogLevel::Info,
            logger: Some(logger.to_owned()),
            data: to_raw_value(data).expect("a string is JSON"),
        }
    }

    #[test]
    fn notifications_are_held_within_their_bytes_and_give_them_back_when_taken() {
        // A progress message of 6 bytes and a line of 4 (`"ab"` with its quotes, no logger)
        // leave one byte of 11.
        let inbox = Inbox::new(100, 11);
        inbox.post(progress("123456"));
        inbox.post(log("ab", ""));
        assert_eq!(inbox.take_dropped().queued_notifications, 0);
        // Two bytes, and an empty line (2) of a one-byte logger: both over, dropped, counted.
        inbox.post(progress("12"));
        inbox.post(log("", "l"));
        assert_eq!(inbox.take_dropped().queued_notifications, 2);
        // One byte fits.
        inbox.post(progress("1"));
        assert_eq!(inbox.take_dropped().queued_notifications, 0);
        // Taken, the progress message gives its 6 bytes back: 6 fit again, 7 do not.
        assert!(matches!(
            inbox.take_event(),
            Some(SessionEvent::Progress { .. })
        ));
        inbox.post(progress("1234567"));
        assert_eq!(inbox.take_dropped().queued_notifications, 1);
        inbox.post(progress("123456"));
        assert_eq!(inbox.take_dropped().queued_notifications, 0);
        let mut left = 0;
        while inbox.take_event().is_some() {
            left += 1;
        }
        assert_eq!(left, 3);
        // Empty, the queue takes its whole budget at once, then nothing more.
        inbox.post(progress("12345678901"));
        inbox.post(progress(""));
        inbox.post(progress("1"));
        assert_eq!(inbox.take_dropped().queued_notifications, 1);
    }

    #[test]
    fn what_is_not_a_notification_is_never_dropped_for_bytes() {
        let inbox = Inbox::new(1, 0);
        inbox.post(SessionEvent::ClientRequestAbandoned {
            server_id: 1,
            reason: "test",
        });
        inbox.post(progress(""));
        assert_eq!(inbox.take_dropped().queued_notifications, 0);
        inbox.post(progress("x"));
        assert_eq!(inbox.take_dropped().queued_notifications, 1);
        assert!(inbox.take_event().is_some());
        assert!(inbox.take_event().is_some());
        assert!(inbox.take_event().is_none());
    }
}
