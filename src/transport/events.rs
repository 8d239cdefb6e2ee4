//! The SSE side of an HTTP session: event ids, the bounded log that `Last-Event-ID` replays
//! from, and the wire form of an event.
//!
//! Every SSE stream of a session has a number (the exchange that opened it; 0 for the
//! session's `GET` stream) and counts its own events from 1. An event's id is
//! `<stream>_<count>`, so a `Last-Event-ID` names both the stream to resume and where in it
//! (Streamable HTTP: ids are unique across the session's streams and replay never crosses
//! streams). The log keeps the session's newest events, bounded by count, by bytes and by
//! age, and every session's log together within the server's replay budget
//! ([`crate::session::replay`]); a resume that asks for events the log no longer holds (or never
//! kept) is refused, never answered with a silent gap. The bytes bounds matter: a client
//! chooses the size of what comes back (an id, a progress token, an echo), and the log holds
//! every event of the session, read or not, for minutes.

use crate::session::replay::{Held, ReplayAccount};
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An event whose data is longer than this goes out in slices of it, each read from the
/// event's shared data as the connection takes it ([`SseEvent::into_chunks`]). actix copies
/// each chunk of a body into the connection's write buffer, and takes chunks while that
/// holds less than 32 KiB: whole, a large event was copied into each connection it went to,
/// and a client that does not read held that copy on the server. A resume (`Last-Event-ID`)
/// of a stream with an 8 MiB event, made again and again and never read, held 8 MiB a
/// connection; in slices, it holds at most about 48 KiB a connection, and the event once.
pub const SLICE_BYTES: usize = 16 * 1024;

/// One SSE event: its id (none for a priming event's data) and its data (a JSON-RPC frame,
/// or empty for a priming event).
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    /// `<stream>_<count>`.
    pub id: String,
    /// The JSON-RPC message, or empty for a priming event.
    pub data: Arc<str>,
}

impl SseEvent {
    /// The event in the SSE wire format (one `data:` line: frames hold no raw newline). An
    /// event without an id (2026-07-28 streams, which cannot be resumed) has no `id:` line.
    pub fn to_wire(&self) -> String {
        let mut out = String::with_capacity(self.data.len() + self.id.len() + 32);
        self.push_head(&mut out);
        out.push_str(&self.data);
        out.push_str("\n\n");
        out
    }

    /// What comes before the event's data: its `id:` line, if it has an id, and `event:
    /// message` and the `data: ` prefix (a priming event, without data, has `data: ` alone).
    fn push_head(&self, out: &mut String) {
        if !self.id.is_empty() {
            out.push_str("id: ");
            out.push_str(&self.id);
            out.push('\n');
        }
        if !self.data.is_empty() {
            out.push_str("event: message\n");
        }
        out.push_str("data: ");
    }
}

impl SseEvent {
    /// The event as the chunks of an SSE body: one, or, for data longer than
    /// [`SLICE_BYTES`], its head, its data in slices (shared, not copied) and its end.
    pub fn into_chunks(self) -> EventChunks {
        if self.data.len() <= SLICE_BYTES {
            return EventChunks {
                head: Some(Bytes::from(self.to_wire())),
                data: Bytes::new(),
                tail: false,
            };
        }
        let mut head = String::with_capacity(self.id.len() + 32);
        self.push_head(&mut head);
        EventChunks {
            head: Some(Bytes::from(head)),
            data: Bytes::from_owner(SharedData(self.data)),
            tail: true,
        }
    }
}

/// An event's data, shared as the bytes of its slices.
struct SharedData(Arc<str>);

impl AsRef<[u8]> for SharedData {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// The chunks of one event on the wire ([`SseEvent::into_chunks`]).
pub struct EventChunks {
    head: Option<Bytes>,
    data: Bytes,
    /// Whether the event's end (`\n\n`) is still to come.
    tail: bool,
}

impl Iterator for EventChunks {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        if let Some(head) = self.head.take() {
            return Some(head);
        }
        if !self.data.is_empty() {
            let len = self.data.len().min(SLICE_BYTES);
            return Some(self.data.split_to(len));
        }
        if std::mem::take(&mut self.tail) {
            return Some(Bytes::from_static(b"\n\n"));
        }
        None
    }
}

/// A `Last-Event-ID`, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// The stream.
    pub stream: u64,
    /// The last event of it the client has.
    pub count: u64,
}

impl Cursor {
    /// Parses `<stream>_<count>`.
    pub fn parse(text: &str) -> Option<Self> {
        let (stream, count) = text.trim().split_once('_')?;
        Some(Self {
            stream: stream.parse().ok()?,
            count: count.parse().ok()?,
        })
    }
}

/// Why a resume cannot be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayError {
    /// The stream is unknown, or events after the cursor are no longer held.
    Gone,
    /// The stream's events are kept in Redis (another node's stream), which could not be
    /// asked: try again (attack run 52a, S1: refused as gone, a client gave its requests
    /// up for good).
    Unavailable,
}

#[derive(Debug)]
struct Logged {
    stream: u64,
    count: u64,
    data: Arc<str>,
    at: Instant,
    /// Its share of the server's replay budget, given back as it goes.
    _held: Held,
}

/// What the log knows of one stream.
#[derive(Debug, Default)]
struct StreamRecord {
    /// Events the stream has had.
    events: u64,
    /// Events of it still in the log.
    retained: u64,
    /// The newest of its events no longer held (evicted, or never kept): a resume from
    /// before it would miss it.
    gone_through: u64,
    /// No more events will come (its answer was sent).
    finished: bool,
}

/// See the module docs.
#[derive(Debug)]
pub struct EventLog {
    events: VecDeque<Logged>,
    streams: HashMap<u64, StreamRecord>,
    /// The data bytes of `events`.
    bytes: usize,
    max_events: usize,
    max_bytes: usize,
    max_age: Duration,
    /// Its client's account with what every session's log (and every parked WebSocket
    /// session) holds together.
    budget: ReplayAccount,
}

impl EventLog {
    /// A log holding at most `max_events` events of at most `max_bytes` of data in all (an
    /// event larger alone is not kept), none older than `max_age`, each within the server's
    /// `budget`.
    pub fn new(
        max_events: usize,
        max_bytes: usize,
        max_age: Duration,
        budget: ReplayAccount,
    ) -> Self {
        Self {
            events: VecDeque::new(),
            streams: HashMap::new(),
            bytes: 0,
            max_events,
            max_bytes,
            max_age,
            budget,
        }
    }

    /// The id the next event of `stream` will get, without logging anything (for a priming
    /// event: resuming from it replays everything that follows).
    pub fn current_id(&mut self, stream: u64) -> String {
        let record = self.streams.entry(stream).or_default();
        format!("{stream}_{}", record.events)
    }

    /// Logs an event of `stream`; returns it with its id, to be sent live whether or not it
    /// was kept.
    ///
    /// Room is made first within the log's own bounds (its oldest events go). Then the
    /// event takes its share of the server's replay budget; while the budget has not that
    /// much left, this log gives up its own oldest events, and if it has none left the
    /// event is not kept: a resume that needs it is refused ([`ReplayError::Gone`]), never
    /// given a gap. The log holds nothing else then, so no event of the stream older than
    /// it is held either.
    pub fn push(&mut self, stream: u64, data: Arc<str>) -> SseEvent {
        let count = {
            let record = self.streams.entry(stream).or_default();
            record.events += 1;
            record.events
        };
        let event = SseEvent {
            id: format!("{stream}_{count}"),
            data,
        };
        let len = event.data.len();
        self.evict(Some(len));
        let held = if len > self.max_bytes {
            // Larger than the log alone, which `evict` has emptied: not kept.
            None
        } else {
            self.hold(len)
        };
        match held {
            Some(held) => {
                if let Some(record) = self.streams.get_mut(&stream) {
                    record.retained += 1;
                }
                self.bytes += len;
                self.events.push_back(Logged {
                    stream,
                    count,
                    data: event.data.clone(),
                    at: Instant::now(),
                    _held: held,
                });
            }
            None => {
                if let Some(record) = self.streams.get_mut(&stream) {
                    record.gone_through = count;
                }
            }
        }
        event
    }

    /// A share of the budget for `len` bytes, giving up this log's oldest events while it
    /// has not that much left; `None` (counted) when even an empty log finds no room.
    fn hold(&mut self, len: usize) -> Option<Held> {
        let mut dropped = 0;
        let held = loop {
            if let Some(held) = self.budget.hold(len) {
                break Some(held);
            }
            // An event of this log given up, or, with none left, this one not kept.
            dropped += 1;
            if !self.evict_oldest() {
                break None;
            }
        };
        self.budget.dropped(dropped);
        held
    }

    /// Marks `stream` finished: it gets no more events, and is forgotten once its last
    /// logged event is evicted.
    pub fn finish(&mut self, stream: u64) {
        if let Some(record) = self.streams.get_mut(&stream) {
            record.finished = true;
            if record.retained == 0 {
                self.streams.remove(&stream);
            }
        }
    }

    /// Whether `stream` is finished (its answer was logged); unknown streams are.
    pub fn is_finished(&self, stream: u64) -> bool {
        self.streams.get(&stream).is_none_or(|r| r.finished)
    }

    /// The events of `cursor.stream` after `cursor.count`, in order.
    ///
    /// # Errors
    /// [`ReplayError::Gone`] when the stream is unknown or some of those events were evicted
    /// or not kept.
    pub fn replay(&mut self, cursor: Cursor) -> Result<Vec<SseEvent>, ReplayError> {
        self.evict(None);
        let record = self.streams.get(&cursor.stream).ok_or(ReplayError::Gone)?;
        if cursor.count > record.events || cursor.count < record.gone_through {
            return Err(ReplayError::Gone);
        }
        Ok(self
            .events
            .iter()
            .filter(|e| e.stream == cursor.stream && e.count > cursor.count)
            .map(|e| SseEvent {
                id: format!("{}_{}", e.stream, e.count),
                data: e.data.clone(),
            })
            .collect())
    }

    /// Lets events older than the log keeps go (a session quiet for long gives its share of
    /// the budget back without waiting for its next event).
    pub fn expire(&mut self) {
        self.evict(None);
    }

    /// Evicts the oldest events until the log, with an `incoming` event of that many bytes,
    /// is within its bounds, and every event older than `max_age`.
    fn evict(&mut self, incoming: Option<usize>) {
        let now = Instant::now();
        let (more, more_bytes) = incoming.map_or((0, 0), |len| (1, len));
        while let Some(oldest) = self.events.front() {
            let too_many = self.events.len() + more > self.max_events
                || self.bytes + more_bytes > self.max_bytes;
            let too_old = now.duration_since(oldest.at) > self.max_age;
            if !too_many && !too_old {
                break;
            }
            self.evict_oldest();
        }
    }

    /// Evicts the oldest event; `false` when there is none.
    fn evict_oldest(&mut self) -> bool {
        let Some(gone) = self.events.pop_front() else {
            return false;
        };
        self.bytes -= gone.data.len();
        if let Some(record) = self.streams.get_mut(&gone.stream) {
            record.retained -= 1;
            record.gone_through = record.gone_through.max(gone.count);
            if record.retained == 0 && record.finished {
                self.streams.remove(&gone.stream);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::metrics::Metrics;
    use crate::session::replay::ReplayBudget;

    #[test]
    fn an_events_chunks_make_its_wire_form() {
        for (id, len) in [
            ("3_1", 10),
            ("", 10),
            ("3_2", SLICE_BYTES),
            ("3_3", 3 * SLICE_BYTES + 7),
        ] {
            let event = SseEvent {
                id: id.to_owned(),
                data: Arc::from("y".repeat(len)),
            };
            let chunks: Vec<Bytes> = event.clone().into_chunks().collect();
            let whole: Vec<u8> = chunks.iter().flat_map(|chunk| chunk.to_vec()).collect();
            assert_eq!(whole, event.to_wire().into_bytes(), "{id} {len}");
            assert!(chunks.iter().all(|chunk| chunk.len() <= SLICE_BYTES + 32));
            let slices = if len > SLICE_BYTES {
                2 + len.div_ceil(SLICE_BYTES)
            } else {
                1
            };
            assert_eq!(chunks.len(), slices, "{id} {len}");
        }
    }

    fn data(text: &str) -> Arc<str> {
        Arc::from(text)
    }

    /// A log bounded by `max_events` and `max_bytes` alone (a budget it never meets).
    fn log(max_events: usize, max_bytes: usize) -> EventLog {
        let budget = ReplayBudget::new(usize::MAX, 0, Arc::default());
        EventLog::new(
            max_events,
            max_bytes,
            Duration::from_secs(60),
            budget.account(None),
        )
    }

    fn cursor(stream: u64, count: u64) -> Cursor {
        Cursor { stream, count }
    }

    fn texts(events: &[SseEvent]) -> Vec<&str> {
        events.iter().map(|e| &*e.data).collect()
    }

    #[test]
    fn past_the_shared_budget_a_log_gives_up_its_oldest_then_keeps_nothing_new() {
        let metrics = Arc::new(Metrics::default());
        let budget = ReplayBudget::new(10, 0, metrics.clone());
        let log = |budget: &Arc<ReplayBudget>| {
            EventLog::new(100, 100, Duration::from_secs(60), budget.account(None))
        };
        let (mut a, mut b) = (log(&budget), log(&budget));
        a.push(1, data("aaaa"));
        a.push(1, data("bbbb"));
        // B has nothing to give up: its event goes out, but is not kept.
        let unkept = b.push(1, data("cccc"));
        assert_eq!((unkept.id.as_str(), &*unkept.data), ("1_1", "cccc"));
        assert_eq!(b.replay(cursor(1, 0)), Err(ReplayError::Gone));
        assert_eq!(metrics.dropped.replay_budget.get(), 1);
        // A makes room by giving up its own oldest.
        a.push(1, data("dddd"));
        assert_eq!(a.replay(cursor(1, 0)), Err(ReplayError::Gone));
        let replayed = a.replay(cursor(1, 1)).expect("b and d are held");
        assert_eq!(texts(&replayed), ["bbbb", "dddd"]);
        assert_eq!(metrics.dropped.replay_budget.get(), 2);
        assert_eq!(budget.in_use(), 8);
        // An event not kept between kept ones: a resume from before it is refused, after
        // it is whole.
        b.push(2, data("x"));
        b.push(2, data("yyyy"));
        b.push(2, data("z"));
        for before in [0, 1] {
            assert_eq!(
                b.replay(cursor(2, before)),
                Err(ReplayError::Gone),
                "{before}"
            );
        }
        assert_eq!(texts(&b.replay(cursor(2, 2)).expect("z is held")), ["z"]);
        assert_eq!(budget.in_use(), 9);
        assert!(metrics.replay_bytes.peak() <= 10, "never past the budget");
        drop(a);
        drop(b);
        assert_eq!(budget.in_use(), 0, "every share given back");
    }

    #[test]
    fn a_finished_stream_whose_answer_was_not_kept_is_forgotten() {
        let budget = ReplayBudget::new(3, 0, Arc::default());
        let mut log = EventLog::new(100, 100, Duration::from_secs(60), budget.account(None));
        log.push(4, data("answer"));
        log.finish(4);
        assert!(log.is_finished(4));
        assert_eq!(log.replay(cursor(4, 0)), Err(ReplayError::Gone));
        assert!(log.streams.is_empty(), "no record of it is left behind");
    }

    #[test]
    fn replay_gives_what_came_after_the_cursor_on_that_stream_only() {
        let mut log = log(100, usize::MAX);
        assert_eq!(log.push(3, data("a")).id, "3_1");
        log.push(0, data("session"));
        log.push(3, data("b"));
        log.push(3, data("c"));
        let replayed = log
            .replay(Cursor {
                stream: 3,
                count: 1,
            })
            .expect("held");
        let texts: Vec<&str> = replayed.iter().map(|e| &*e.data).collect();
        assert_eq!(texts, ["b", "c"]);
        assert_eq!(replayed[0].id, "3_2");
        assert!(log
            .replay(Cursor {
                stream: 3,
                count: 3
            })
            .expect("held")
            .is_empty());
        assert_eq!(
            log.replay(Cursor {
                stream: 3,
                count: 9
            }),
            Err(ReplayError::Gone)
        );
        assert_eq!(
            log.replay(Cursor {
                stream: 7,
                count: 0
            }),
            Err(ReplayError::Gone)
        );
    }

    #[test]
    fn an_evicted_event_makes_an_older_cursor_a_gap() {
        let mut log = log(2, usize::MAX);
        log.push(1, data("a"));
        log.push(1, data("b"));
        log.push(1, data("c"));
        // "a" is gone: a client that has nothing of stream 1 cannot be made whole.
        assert_eq!(
            log.replay(Cursor {
                stream: 1,
                count: 0
            }),
            Err(ReplayError::Gone)
        );
        let replayed = log
            .replay(Cursor {
                stream: 1,
                count: 1,
            })
            .expect("b and c are held");
        assert_eq!(replayed.len(), 2);
    }

    #[test]
    fn finished_streams_are_forgotten_with_their_last_event() {
        let mut log = log(1, usize::MAX);
        log.push(5, data("answer"));
        log.finish(5);
        assert!(log
            .replay(Cursor {
                stream: 5,
                count: 0
            })
            .is_ok());
        log.push(6, data("other"));
        assert_eq!(
            log.replay(Cursor {
                stream: 5,
                count: 0
            }),
            Err(ReplayError::Gone)
        );
        assert!(log.is_finished(5));
    }

    #[test]
    fn cursors_parse_and_events_have_one_data_line() {
        assert_eq!(
            Cursor::parse("12_7"),
            Some(Cursor {
                stream: 12,
                count: 7
            })
        );
        for bad in ["", "12", "a_1", "1_b", "1_2_3"] {
            assert_eq!(Cursor::parse(bad), None, "{bad}");
        }
        let event = SseEvent {
            id: "0_1".into(),
            data: data(r#"{"a":1}"#),
        };
        assert_eq!(
            event.to_wire(),
            "id: 0_1\nevent: message\ndata: {\"a\":1}\n\n"
        );
        let priming = SseEvent {
            id: "0_0".into(),
            data: data(""),
        };
        assert_eq!(priming.to_wire(), "id: 0_0\ndata: \n\n");
    }
}
