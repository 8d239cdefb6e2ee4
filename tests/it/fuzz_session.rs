//! A bounded randomized fuzz test of a whole session, driven in-process through the
//! in-memory transport (no socket), with frame limits small enough to be hit: each case
//! initializes a fresh session, then sends a random mix of valid and invalid requests,
//! notifications, cancels, batches (some over `max_batch_len`), truncated and garbage frames,
//! big values (a 32 KiB echo), and values over the depth, string, array and object limits.
//!
//! For every case:
//! - nothing panics, and the session answers a final `ping`;
//! - every answer with an id answers a request that was sent, and no request is answered
//!   twice; notifications are never answered (no answer carries an id that was only ever
//!   sent in a notification);
//! - every request that was not cancelled (and not in a batch refused whole) is answered in
//!   the end;
//! - answers with a null id are no more than the frames that may earn one.
//!
//! Proptest generates the cases (and shrinks a failing one to a short sequence); 24 cases by
//! default, `FUZZ_CASES` for more. A case takes milliseconds: tool calls sleep at most 20 ms.

use crate::support::*;

use mcp_ws::testing::jsonrpc::FrameLimits;
use mcp_ws::testing::memory::{ClientFrame, MemorySession};
use mcp_ws::Settings;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;

fn fuzz_settings() -> Settings {
    let mut s = settings();
    s.limits.max_batch_len = 6;
    s.limits.max_in_flight_per_session = 4;
    s.limits.max_json_depth = 12;
    s.limits.max_string_bytes = 40_000;
    s.limits.max_array_len = 32;
    s.limits.max_object_members = 32;
    s.progress.min_interval_ms = 0;
    s
}

/// What a request asks for.
#[derive(Debug, Clone)]
enum Call {
    Ping,
    ToolsList,
    Echo(usize),
    Add,
    Fail,
    Sleep(u64),
    SleepWithProgress(u64),
    ReadReadme,
    Greet,
    SetLevel(&'static str),
    UnknownMethod,
    BadParams,
    BadVersion,
    ParamsNotObject,
    InitializeAgain,
    Deep(usize),
    LongString(usize),
    LongArray(usize),
    WideObject(usize),
}

/// A message of a frame.
#[derive(Debug, Clone)]
enum Message {
    Request(Call),
    Notification(Call),
    /// Cancels the request sent this many requests ago (if any).
    Cancel(usize),
}

/// A frame.
#[derive(Debug, Clone)]
enum Action {
    Single(Message),
    Batch(Vec<Message>),
    /// A valid request, cut short: not JSON.
    Truncated(Call, usize),
    /// Text that is not a JSON object or array.
    Garbage(String),
}

fn call() -> impl Strategy<Value = Call> {
    prop_oneof![
        3 => Just(Call::Ping),
        1 => Just(Call::ToolsList),
        3 => prop_oneof![4 => 0usize..64, 1 => Just(32 * 1024)].prop_map(Call::Echo),
        1 => Just(Call::Add),
        1 => Just(Call::Fail),
        2 => (0u64..20).prop_map(Call::Sleep),
        1 => (0u64..20).prop_map(Call::SleepWithProgress),
        1 => Just(Call::ReadReadme),
        1 => Just(Call::Greet),
        1 => prop::sample::select(vec!["debug", "error", "nonsense"]).prop_map(Call::SetLevel),
        1 => Just(Call::UnknownMethod),
        1 => Just(Call::BadParams),
        1 => Just(Call::BadVersion),
        1 => Just(Call::ParamsNotObject),
        1 => Just(Call::InitializeAgain),
        1 => (8usize..16).prop_map(Call::Deep),
        1 => prop_oneof![Just(10), Just(50_000)].prop_map(Call::LongString),
        1 => (20usize..40).prop_map(Call::LongArray),
        1 => (20usize..40).prop_map(Call::WideObject),
    ]
}

fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        6 => call().prop_map(Message::Request),
        1 => call().prop_map(Message::Notification),
        2 => (0usize..4).prop_map(Message::Cancel),
    ]
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        8 => message().prop_map(Action::Single),
        3 => prop::collection::vec(message(), 1..9).prop_map(Action::Batch),
        1 => (call(), 1usize..40).prop_map(|(call, cut)| Action::Truncated(call, cut)),
        1 => "[^\\[{ \\t\\n\\r][^\\n]{0,40}".prop_map(Action::Garbage),
    ]
}

/// The method and params of a call, or the whole message for the calls that break the
/// envelope.
fn body(call: &Call) -> (Value, Option<Value>) {
    let tool = |name: &str, arguments: Value| {
        (
            json!("tools/call"),
            Some(json!({"name": name, "arguments": arguments})),
        )
    };
    match call {
        Call::Ping => (json!("ping"), None),
        Call::ToolsList => (json!("tools/list"), Some(json!({}))),
        Call::Echo(len) => tool("echo", json!({"text": "e".repeat(*len)})),
        Call::Add => tool("add", json!({"a": 1, "b": 2})),
        Call::Fail => tool("fail", json!({"message": "on purpose"})),
        Call::Sleep(ms) => tool("sleep", json!({"ms": ms})),
        Call::SleepWithProgress(ms) => (
            json!("tools/call"),
            Some(json!({"name":"sleep","arguments":{"ms":ms},"_meta":{"progressToken":"p"}})),
        ),
        Call::ReadReadme => (
            json!("resources/read"),
            Some(json!({"uri":"mcp-ws://demo/readme"})),
        ),
        Call::Greet => (
            json!("prompts/get"),
            Some(json!({"name":"greet","arguments":{"name":"fuzz"}})),
        ),
        Call::SetLevel(level) => (json!("logging/setLevel"), Some(json!({"level": level}))),
        Call::UnknownMethod => (json!("no/such/method"), None),
        Call::BadParams => tool("add", json!({"a": "one"})),
        Call::BadVersion | Call::ParamsNotObject => (json!("ping"), Some(json!([1]))),
        Call::InitializeAgain => (json!("initialize"), Some(initialize_params("2025-11-25"))),
        Call::Deep(levels) => (
            json!("ping"),
            Some(json!({"_meta": (0..*levels).fold(json!(0), |v, _| json!([v]))})),
        ),
        Call::LongString(len) => tool("echo", json!({"text": "s".repeat(*len)})),
        Call::LongArray(len) => (json!("ping"), Some(json!({"_meta": vec![0; *len]}))),
        Call::WideObject(members) => (
            json!("ping"),
            Some(json!({"_meta": (0..*members)
                .map(|i| (format!("k{i}"), json!(i)))
                .collect::<serde_json::Map<_, _>>()})),
        ),
    }
}

fn to_json(call: &Call, id: Option<&Value>) -> Value {
    let (method, params) = body(call);
    let mut message = json!({"jsonrpc": "2.0", "method": method});
    if let Call::BadVersion = call {
        message["jsonrpc"] = json!("1.0");
    }
    if let Some(params) = params {
        message["params"] = params;
    }
    if let Call::ParamsNotObject = call {
        message["params"] = json!("not an object");
    }
    if let Some(id) = id {
        message["id"] = id.clone();
    }
    message
}

/// The bookkeeping of one case.
#[derive(Default)]
struct Ledger {
    next_id: u64,
    /// Ids of requests sent, in order.
    sent: Vec<Value>,
    /// Requests that must be answered in the end.
    expected: HashSet<String>,
    cancelled: HashSet<String>,
    /// Answers received, by id.
    answered: HashMap<String, usize>,
    /// Frames that may earn an answer with a null id.
    may_answer_null: usize,
    null_answers: usize,
}

impl Ledger {
    /// A fresh id, in one of the forms clients use.
    fn fresh_id(&mut self) -> Value {
        self.next_id += 1;
        let n = self.next_id;
        match n % 3 {
            0 => json!(n),
            1 => json!(format!("r-{n}")),
            _ => json!(format!("é\"{n}")),
        }
    }

    /// The JSON of a message, recording what it expects.
    fn message(&mut self, message: &Message) -> Value {
        match message {
            Message::Request(call) => {
                let id = self.fresh_id();
                self.sent.push(id.clone());
                to_json(call, Some(&id))
            }
            Message::Notification(call) => to_json(call, None),
            Message::Cancel(back) => {
                let target = self
                    .sent
                    .len()
                    .checked_sub(back + 1)
                    .map(|i| self.sent[i].clone())
                    .unwrap_or(json!("none"));
                self.cancelled.insert(target.to_string());
                json!({"jsonrpc":"2.0","method":"notifications/cancelled",
                    "params":{"requestId": target, "reason": "fuzz"}})
            }
        }
    }

    /// Registers the requests of a frame as expected to be answered (unless refused whole).
    fn expect(&mut self, messages: &[Value], refused_whole: bool) {
        for message in messages {
            if let Some(id) = message.get("id") {
                if !refused_whole {
                    self.expected.insert(id.to_string());
                }
            }
        }
    }

    /// Takes one frame the session sent.
    fn receive(&mut self, frame: &str) -> Result<(), TestCaseError> {
        let value: Value = serde_json::from_str(frame)
            .map_err(|e| TestCaseError::fail(format!("not JSON ({e}): {frame}")))?;
        let answers = match value {
            Value::Array(answers) => answers,
            single => vec![single],
        };
        for answer in answers {
            if answer.get("method").is_some() {
                // A notification (progress): not an answer.
                continue;
            }
            let id = answer
                .get("id")
                .ok_or_else(|| TestCaseError::fail(format!("an answer without id: {answer}")))?;
            prop_assert!(
                answer.get("result").is_some() != answer.get("error").is_some(),
                "exactly one of result and error: {}",
                answer
            );
            if id.is_null() {
                self.null_answers += 1;
                continue;
            }
            let key = id.to_string();
            prop_assert!(
                self.sent.iter().any(|sent| sent == id),
                "an answer to no request sent: {}",
                answer
            );
            let count = self.answered.entry(key).or_default();
            *count += 1;
            prop_assert_eq!(*count, 1, "answered twice: {}", answer);
        }
        Ok(())
    }
}

struct Case {
    session: actix::Addr<MemorySession>,
    frames: UnboundedReceiver<String>,
    ledger: Ledger,
    limits: FrameLimits,
}

impl Case {
    fn send(&mut self, text: String) {
        self.session.do_send(ClientFrame(text));
    }

    /// Reads what has arrived without waiting.
    fn take_ready(&mut self) -> Result<(), TestCaseError> {
        while let Ok(frame) = self.frames.try_recv() {
            self.ledger.receive(&frame)?;
        }
        Ok(())
    }

    /// Reads until `done` holds, failing after READ_TIMEOUT.
    async fn read_until(&mut self, done: impl Fn(&Ledger) -> bool) -> Result<(), TestCaseError> {
        let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
        while !done(&self.ledger) {
            let frame = tokio::time::timeout_at(deadline, self.frames.recv())
                .await
                .map_err(|_| {
                    let missing: Vec<_> = self
                        .ledger
                        .expected
                        .iter()
                        .filter(|id| !self.ledger.answered.contains_key(*id))
                        .collect();
                    TestCaseError::fail(format!("still unanswered: {missing:?}"))
                })?
                .ok_or_else(|| TestCaseError::fail("the session is gone"))?;
            self.ledger.receive(&frame)?;
        }
        Ok(())
    }

    fn act(&mut self, action: &Action) {
        match action {
            Action::Single(message) => {
                let json = self.ledger.message(message);
                let text = json.to_string();
                // A single request is answered even over a shape limit (under its id).
                self.ledger.expect(std::slice::from_ref(&json), false);
                if json.get("id").is_none() || self.limits.check(&text).is_err() {
                    self.ledger.may_answer_null += 1;
                }
                self.send(text);
            }
            Action::Batch(messages) => {
                let entries: Vec<Value> = messages.iter().map(|m| self.ledger.message(m)).collect();
                let text = Value::Array(entries.clone()).to_string();
                let refused_whole =
                    entries.len() > self.limits.batch_len() || self.limits.check(&text).is_err();
                self.ledger.expect(&entries, refused_whole);
                self.ledger.may_answer_null += if refused_whole { 1 } else { entries.len() };
                self.send(text);
            }
            Action::Truncated(call, cut) => {
                let id = self.ledger.fresh_id();
                let text = to_json(call, Some(&id)).to_string();
                let end = text.len().saturating_sub(*cut).max(1);
                let end = (0..=end)
                    .rev()
                    .find(|&i| text.is_char_boundary(i))
                    .unwrap_or(0);
                self.ledger.may_answer_null += 1;
                self.send(text[..end].to_owned());
            }
            Action::Garbage(text) => {
                self.ledger.may_answer_null += 1;
                self.send(text.clone());
            }
        }
    }
}

async fn run_case(actions: Vec<Action>) -> Result<(), TestCaseError> {
    let settings = fuzz_settings();
    let limits = FrameLimits::new(settings.limits.max_batch_len)
        .max_depth(settings.limits.max_json_depth)
        .max_string_bytes(settings.limits.max_string_bytes)
        .max_array_len(settings.limits.max_array_len)
        .max_object_members(settings.limits.max_object_members);
    let shared = crate::demo::demo(mcp_ws::Server::builder().settings(settings))
        .build()
        .expect("server builds")
        .shared()
        .clone();
    let (session, frames) = MemorySession::start(shared.clone());
    let mut case = Case {
        session,
        frames,
        ledger: Ledger::default(),
        limits,
    };
    case.ledger.sent.push(json!("init"));
    case.ledger.expected.insert(json!("init").to_string());
    case.send(
        json!({"jsonrpc":"2.0","id":"init","method":"initialize",
            "params": initialize_params("2025-11-25")})
        .to_string(),
    );
    for action in &actions {
        case.act(action);
        case.take_ready()?;
        // Let the session and its workers run between frames now and then.
        tokio::task::yield_now().await;
    }
    case.ledger.sent.push(json!("final"));
    case.ledger.expected.insert(json!("final").to_string());
    case.send(json!({"jsonrpc":"2.0","id":"final","method":"ping"}).to_string());
    case.read_until(|ledger| {
        ledger
            .expected
            .iter()
            .filter(|id| !ledger.cancelled.contains(*id))
            .all(|id| ledger.answered.contains_key(id))
    })
    .await?;
    prop_assert!(
        case.ledger.null_answers <= case.ledger.may_answer_null,
        "{} null-id answers for {} frames that may earn one",
        case.ledger.null_answers,
        case.ledger.may_answer_null
    );
    // Nothing is left running once every answer is in (cancelled ones stopped).
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    while shared.metrics.workers.get() != 0 {
        prop_assert!(
            tokio::time::Instant::now() < deadline,
            "workers left running"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
        case.take_ready()?;
    }
    Ok(())
}

fn cases() -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(24)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn a_session_survives_random_traffic(actions in prop::collection::vec(action(), 1..48)) {
        actix_rt::System::new().block_on(run_case(actions))?;
    }
}
