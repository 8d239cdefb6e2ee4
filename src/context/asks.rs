//! How a request's asks (roots, sampling, elicitation) reach the client, per era: requests
//! to the client in a session, the rounds of a 2026-07-28 multi round-trip request, the
//! asks of a call that became a task, or a unit test's closure; and which log lines of a
//! request go out. Internal to the server (the tests and benches reach it through
//! `mcp_ws::testing`).

use super::*;

pub(super) type TestClientFn = dyn Fn(&str, &Value) -> Result<Value, ClientError>;

/// How a request's asks (roots, sampling, elicitation) reach the client.
pub enum Input {
    /// A session-era session: each ask is a request to the client, awaited.
    Session,
    /// A 2026-07-28 request: asks are answered from the request's `inputResponses`; an ask
    /// without an answer stops the request, which is answered with the asks it reached.
    Rounds(Rc<Rounds>),
    /// A 2026-07-28 call that may become a task: as `Rounds` until it does, then each ask
    /// parks the task in `input_required` until `tasks/update` answers it.
    Task(Rc<TaskAsks>),
    /// A unit test: answered by the test's closure.
    Test(Rc<TestClientFn>),
    /// A request that may not ask (a 2026-07-28 completion: it has no `input_required`
    /// round): every ask fails at once, as for a client without the capability.
    Refused,
}

/// The least severe log level a request's lines must have to go out.
#[derive(Debug, Clone, Copy)]
pub enum LogFloor {
    /// The session's level (`logging/setLevel`).
    Session,
    /// The request's own `_meta` level (2026-07-28); `None`: the request set none, so no
    /// line goes out.
    Request(Option<LogLevel>),
}

/// The asks and answers of one round of a 2026-07-28 multi round-trip request.
pub struct Rounds {
    /// The client's answers so far (earlier rounds, from the request state, and this one's
    /// `inputResponses`), by key.
    pub(super) answers: serde_json::Map<String, Value>,
    /// The keys asked in earlier rounds: those the request state names as outstanding and
    /// those it carries answers to.
    asked_before: std::collections::HashSet<String>,
    /// The asks this round reached that have no usable answer.
    asked: std::cell::RefCell<Vec<Ask>>,
    /// Woken when an ask is recorded (the worker watches for it).
    watcher: std::cell::RefCell<Option<std::task::Waker>>,
    /// The keys handed out this round.
    keys: AskKeys,
    /// The most asks without an answer one round may record
    /// (`limits.max_in_flight_per_session`, as a session bounds its requests to the client).
    max_asks: usize,
}

/// The keys of a request's asks in `inputRequests`: a tool's own key when it is free, else
/// (an ask that names none, or names one used already) the next free number (`"n"`, or
/// `"key.n"`). Never one key for two asks: a tool's `"1"` and its first unnamed ask would
/// share one answer, and a loop asking `"name"` again after a bad answer would be handed
/// that answer for ever. Handed out in the order the tool asks, so a tool run again in the
/// next round gets the same keys.
#[derive(Default)]
struct AskKeys {
    used: std::cell::RefCell<std::collections::HashSet<String>>,
    next: Cell<u32>,
}

impl AskKeys {
    fn key(&self, explicit: Option<&str>) -> String {
        let mut used = self.used.borrow_mut();
        let key = match explicit {
            Some(key) if !used.contains(key) && !self.may_number(key) => key.to_owned(),
            _ => loop {
                let n = self.next.get() + 1;
                self.next.set(n);
                let candidate = match explicit {
                    Some(key) => format!("{key}.{n}"),
                    None => n.to_string(),
                };
                if !used.contains(&candidate) {
                    break candidate;
                }
            },
        };
        used.insert(key.clone());
        key
    }

    /// Whether `key` is one an unnamed ask may be given later: a number. A tool's own
    /// number is taken as its name only if no unnamed ask could reach it first in a later
    /// run, which cannot be known: it is renamed like a used key.
    fn may_number(&self, key: &str) -> bool {
        !key.is_empty() && key.bytes().all(|b| b.is_ascii_digit())
    }
}

/// Something a 2026-07-28 request needs from the client: an entry of `inputRequests`.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    /// Its key in `inputRequests` (and in the client's `inputResponses`).
    pub key: String,
    /// `elicitation/create`, `sampling/createMessage` or `roots/list`.
    pub method: &'static str,
    /// The request's params.
    pub params: Value,
}

impl Rounds {
    /// A round with these answers gathered, of a request that asked `asked_before` in its
    /// earlier rounds, recording at most `max_asks` asks without an answer.
    pub fn new(
        answers: serde_json::Map<String, Value>,
        asked_before: std::collections::HashSet<String>,
        max_asks: usize,
    ) -> Self {
        Self {
            answers,
            asked_before,
            asked: Default::default(),
            watcher: Default::default(),
            keys: AskKeys::default(),
            max_asks,
        }
    }

    pub(super) fn key(&self, explicit: Option<&str>) -> String {
        self.keys.key(explicit)
    }

    /// Records an ask without an answer, or refuses it (`Err` with the limit) when the round
    /// holds `max_asks` already: a tool asking once per item of its arguments made a round
    /// of any size (each `inputRequests` entry, and the next request's answers and state).
    /// Its key is its own ([`AskKeys`] never hands one out twice).
    pub(super) fn ask(&self, ask: Ask) -> Result<(), usize> {
        let mut asked = self.asked.borrow_mut();
        if asked.len() >= self.max_asks {
            return Err(self.max_asks);
        }
        asked.push(ask);
        drop(asked);
        if let Some(waker) = self.watcher.borrow_mut().take() {
            waker.wake();
        }
        Ok(())
    }

    /// The answers gathered so far that the next round's state carries: those to keys this
    /// round reached (the tool, run again, reaches them again, a key it re-asks under
    /// included) or that were asked in an earlier round. An answer to a key no ask reached
    /// is left out: `inputResponses` may name any key, and all of them went into the state,
    /// one larger than the request that brought them (and than the server takes back).
    pub fn carried_answers(&self) -> serde_json::Map<String, Value> {
        let reached = self.keys.used.borrow();
        self.answers
            .iter()
            .filter(|(key, _)| reached.contains(*key) || self.asked_before.contains(*key))
            .map(|(key, answer)| (key.clone(), answer.clone()))
            .collect()
    }

    /// Resolves once the request asked for something it has no answer to.
    pub async fn input_needed(&self) {
        std::future::poll_fn(|cx| {
            if self.asked.borrow().is_empty() {
                *self.watcher.borrow_mut() = Some(cx.waker().clone());
                std::task::Poll::Pending
            } else {
                std::task::Poll::Ready(())
            }
        })
        .await
    }

    /// Whether the request asked for something it has no answer to.
    pub fn has_asks(&self) -> bool {
        !self.asked.borrow().is_empty()
    }

    /// The asks reached without an answer.
    pub fn take_asks(&self) -> Vec<Ask> {
        std::mem::take(&mut self.asked.borrow_mut())
    }
}

/// The asks of a call that may become a task (see [`Input::Task`]).
pub struct TaskAsks {
    /// Before the call became a task: its round's answers and asks.
    pub(super) rounds: Rc<Rounds>,
    /// Set once the call became a task.
    pub(super) detached: Cell<bool>,
    /// Asks waiting for `tasks/update`, by their key in `inputRequests`.
    pending: std::cell::RefCell<std::collections::BTreeMap<String, PendingAsk>>,
    /// Every key handed out: keys are never reused within a task.
    keys: AskKeys,
    /// Set when `pending` changed since the runner last looked.
    changed: Cell<bool>,
    /// Woken when `pending` changes (the task's runner watches for it).
    watcher: std::cell::RefCell<Option<std::task::Waker>>,
}

struct PendingAsk {
    ask: Ask,
    reply: oneshot::Sender<Value>,
}

/// How often a task asks again after an answer that does not fit, before the ask fails.
pub(super) const TASK_ASK_ATTEMPTS: usize = 3;

impl TaskAsks {
    /// The asks of a call whose round has these answers.
    pub fn new(rounds: Rc<Rounds>) -> Self {
        Self {
            rounds,
            detached: Cell::new(false),
            pending: Default::default(),
            keys: AskKeys::default(),
            changed: Cell::new(false),
            watcher: Default::default(),
        }
    }

    /// The round the call ran in before it became a task.
    pub fn rounds(&self) -> &Rc<Rounds> {
        &self.rounds
    }

    /// From now on asks park the task.
    pub fn detach(&self) {
        self.detached.set(true);
    }

    /// A key not used before in this task: the tool's own when it is free.
    fn key(&self, explicit: Option<&str>) -> String {
        self.keys.key(explicit)
    }

    fn touch(&self) {
        self.changed.set(true);
        if let Some(waker) = self.watcher.borrow_mut().take() {
            waker.wake();
        }
    }

    /// Parks an ask until it is answered; refused ([`ClientRequestError::TooMany`]) when the
    /// task has as many parked as a round may record.
    pub(super) async fn park(
        &self,
        key: Option<&str>,
        method: &'static str,
        params: Value,
    ) -> Result<Value, ClientRequestError> {
        let limit = self.rounds.max_asks;
        if self.pending.borrow().len() >= limit {
            return Err(ClientRequestError::TooMany { limit });
        }
        let key = self.key(key);
        let (reply, answer) = oneshot::channel();
        self.pending.borrow_mut().insert(
            key.clone(),
            PendingAsk {
                ask: Ask {
                    key: key.clone(),
                    method,
                    params,
                },
                reply,
            },
        );
        self.touch();
        // A tool that stops waiting (it raced the ask against something else) withdraws it.
        struct Withdraw<'a>(&'a TaskAsks, String);
        impl Drop for Withdraw<'_> {
            fn drop(&mut self) {
                if self.0.pending.borrow_mut().remove(&self.1).is_some() {
                    self.0.touch();
                }
            }
        }
        let _withdraw = Withdraw(self, key);
        answer.await.map_err(|_| ClientRequestError::Disconnected)
    }

    /// Gives the answers to the asks they name; answers to keys not outstanding are
    /// ignored. Returns how many asks were answered.
    pub fn answer(&self, responses: serde_json::Map<String, Value>) -> usize {
        let mut answered = 0;
        let mut pending = self.pending.borrow_mut();
        for (key, value) in responses {
            if let Some(waiting) = pending.remove(&key) {
                // The tool may have stopped waiting meanwhile: nothing to do then.
                let _ = waiting.reply.send(value);
                answered += 1;
            }
        }
        drop(pending);
        if answered > 0 {
            self.touch();
        }
        answered
    }

    /// The outstanding asks, as `inputRequests`.
    pub fn outstanding(&self) -> serde_json::Map<String, Value> {
        self.pending
            .borrow()
            .values()
            .map(|p| {
                (
                    p.ask.key.clone(),
                    serde_json::json!({ "method": p.ask.method, "params": p.ask.params }),
                )
            })
            .collect()
    }

    /// The keys of [`outstanding`](Self::outstanding), sorted: what tells whether the asks
    /// changed (each ask has a key of its own, a question asked again a new one), without
    /// copying their params.
    pub fn outstanding_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .pending
            .borrow()
            .values()
            .map(|p| p.ask.key.clone())
            .collect();
        keys.sort_unstable();
        keys
    }

    /// Resolves once the outstanding asks changed since the last time it resolved.
    pub async fn changed(&self) {
        std::future::poll_fn(|cx| {
            if self.changed.replace(false) {
                std::task::Poll::Ready(())
            } else {
                *self.watcher.borrow_mut() = Some(cx.waker().clone());
                std::task::Poll::Pending
            }
        })
        .await
    }
}
