//! The SSE events of an HTTP session, mirrored to a Redis Stream (sessions in Redis), so a
//! `Last-Event-ID` can resume a stream on any node: after the event it names, the node
//! replays what the stream's node mirrored, then goes on with what it still mirrors, until
//! the stream's answer; if that node is found dead first, each request of the stream is
//! answered with an error saying so, never left unanswered.
//!
//! Each entry is one of: `b` (a stream begins; `i` holds the JSON ids of its requests, empty
//! for a session's `GET` stream), `e` (an event: stream `s`, its count `c`, data `d`), `f`
//! (the stream is finished). The stream is bounded like the node's own log: about
//! `sessions.event_buffer_messages` entries, roughly the newest within `event_buffer_bytes`
//! of the entries this node wrote (another node's entries in the same session's stream
//! count as nothing here, and may be cut with this node's; the count's trim is Redis's
//! approximate one, whose leftovers are not counted), and gone `event_buffer_age_ms` after
//! its last.
//! Writes go in order through one task per session, several per round trip; a full queue or
//! a failed write drops (counted in `mcp_bus_bridge_dropped_total`), which a resume then
//! reports as a gap (400), never hides.

use super::awaited::answer_ids;
use super::events::{Cursor, SseEvent};
use crate::cluster::store::StreamEntry;
use crate::cluster::Cluster;
use crate::protocol::jsonrpc::RequestId;
use serde_json::value::RawValue;
use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Mirror operations waiting to be written.
const QUEUE: usize = 4096;
/// Entries written per round trip, at most.
const BATCH: usize = 128;

/// One operation on the mirror.
enum Op {
    Begin {
        stream: u64,
        ids: String,
    },
    Event {
        stream: u64,
        count: u64,
        data: Arc<str>,
    },
    Finish {
        stream: u64,
    },
}

/// The writer of one session's mirror; see the module docs.
pub(crate) struct Mirror {
    queue: mpsc::Sender<Op>,
    /// The data bytes of the events in `queue`, within `sessions.event_buffer_bytes`: while
    /// Redis is slow the queue would otherwise hold every event the node's log let go of.
    queued: Rc<Cell<usize>>,
    cluster: Arc<Cluster>,
}

impl Mirror {
    /// Starts the writer of session `id`'s mirror (on the current thread).
    pub(crate) fn start(cluster: Arc<Cluster>, id: &str) -> Self {
        let (queue, ops) = mpsc::channel(QUEUE);
        let queued = Rc::new(Cell::new(0));
        if let Some(redis) = cluster.store.redis() {
            let writer = write(cluster.clone(), redis.events_key(id), ops, queued.clone());
            actix::spawn(writer);
        }
        Self {
            queue,
            queued,
            cluster,
        }
    }

    fn push(&self, op: Op) {
        let bytes = op.data_bytes();
        let max_bytes = self.cluster.settings.sessions.event_buffer_bytes;
        let room = self.queued.get().saturating_add(bytes) <= max_bytes;
        if room && self.queue.try_send(op).is_ok() {
            self.queued.set(self.queued.get() + bytes);
        } else {
            self.cluster.metrics.bridge_dropped.inc();
        }
    }

    /// Stream `stream` begins, for the requests `ids` (JSON array; empty: the GET stream).
    pub(crate) fn begin(&self, stream: u64, ids: String) {
        self.push(Op::Begin { stream, ids });
    }

    /// An event of a stream.
    pub(crate) fn event(&self, stream: u64, count: u64, data: Arc<str>) {
        self.push(Op::Event {
            stream,
            count,
            data,
        });
    }

    /// Stream `stream` is over.
    pub(crate) fn finish(&self, stream: u64) {
        self.push(Op::Finish { stream });
    }
}

impl Op {
    /// The bytes of event data it holds.
    fn data_bytes(&self) -> usize {
        match self {
            Self::Event { data, .. } => data.len(),
            Self::Begin { .. } | Self::Finish { .. } => 0,
        }
    }
}

async fn write(
    cluster: Arc<Cluster>,
    key: String,
    mut ops: mpsc::Receiver<Op>,
    queued: Rc<Cell<usize>>,
) {
    let sessions = &cluster.settings.sessions;
    let max_len = sessions.event_buffer_messages.max(1);
    let ttl = Duration::from_millis(sessions.event_buffer_age_ms);
    let mut held = Held::new(sessions.event_buffer_bytes, max_len);
    let take = |op: Op| {
        queued.set(queued.get().saturating_sub(op.data_bytes()));
        entry(op)
    };
    while let Some(first) = ops.recv().await {
        let mut batch = vec![take(first)];
        while batch.len() < BATCH {
            match ops.try_recv() {
                Ok(op) => batch.push(take(op)),
                Err(_) => break,
            }
        }
        let Some(redis) = cluster.store.redis() else {
            return;
        };
        let cut_to = held.append(&batch);
        if !redis
            .append_events(&cluster.metrics, &key, batch, (max_len, cut_to), ttl)
            .await
        {
            cluster.metrics.bridge_dropped.inc();
        }
    }
}

/// The sizes of the entries this writer appended that the stream still holds, oldest first,
/// to cut it to `max_bytes` of them.
struct Held {
    sizes: std::collections::VecDeque<usize>,
    bytes: usize,
    max_bytes: usize,
    max_len: usize,
}

impl Held {
    fn new(max_bytes: usize, max_len: usize) -> Self {
        Self {
            sizes: std::collections::VecDeque::new(),
            bytes: 0,
            max_bytes,
            max_len,
        }
    }

    /// Counts `batch` in; the number of entries the stream is to be cut to when its bytes
    /// are over the bound (at least the newest: a stream without its last entry would not
    /// say how far it went), else `None` (the count bound is `XADD`'s own).
    fn append(&mut self, batch: &[Vec<(&'static str, String)>]) -> Option<usize> {
        for fields in batch {
            let size = fields.iter().map(|(f, v)| f.len() + v.len()).sum();
            self.sizes.push_back(size);
            self.bytes += size;
        }
        let mut cut = false;
        while self.sizes.len() > 1
            && (self.bytes > self.max_bytes || self.sizes.len() > self.max_len)
        {
            cut |= self.bytes > self.max_bytes;
            self.bytes -= self.sizes.pop_front().unwrap_or_default();
        }
        cut.then_some(self.sizes.len())
    }
}

/// Writes stream `stream` whole into the mirror under `key`, outside the session's writer:
/// begun for the requests `ids`, its `events`, finished. For a node that answers the
/// requests of a stream whose node was lost under a number of its own
/// (`hosted::follow_mirror`), so that a resume from one of those answers is served anywhere.
/// A write that fails is counted (`mcp_bus_bridge_dropped_total`): such a resume is refused.
pub(crate) async fn write_whole(
    cluster: &Cluster,
    key: &str,
    stream: u64,
    ids: &[&RequestId],
    events: &[SseEvent],
) {
    let Some(redis) = cluster.store.redis() else {
        return;
    };
    let ids = format!(
        "[{}]",
        ids.iter()
            .map(|id| id.as_json())
            .collect::<Vec<_>>()
            .join(",")
    );
    let mut ops = vec![Op::Begin { stream, ids }];
    ops.extend(events.iter().enumerate().map(|(at, event)| Op::Event {
        stream,
        count: at as u64 + 1,
        data: event.data.clone(),
    }));
    ops.push(Op::Finish { stream });
    let sessions = &cluster.settings.sessions;
    let bounds = (sessions.event_buffer_messages.max(1), None);
    let ttl = Duration::from_millis(sessions.event_buffer_age_ms);
    let entries = ops.into_iter().map(entry).collect();
    if !redis
        .append_events(&cluster.metrics, key, entries, bounds, ttl)
        .await
    {
        cluster.metrics.bridge_dropped.inc();
    }
}

fn entry(op: Op) -> Vec<(&'static str, String)> {
    match op {
        Op::Begin { stream, ids } => vec![("k", "b".into()), ("s", stream.to_string()), ("i", ids)],
        Op::Event {
            stream,
            count,
            data,
        } => vec![
            ("k", "e".into()),
            ("s", stream.to_string()),
            ("c", count.to_string()),
            ("d", data.to_string()),
        ],
        Op::Finish { stream } => vec![("k", "f".into()), ("s", stream.to_string())],
    }
}

/// What the mirror holds of one stream, as far as it was read.
#[derive(Debug, Default)]
pub(crate) struct Mirrored {
    /// The events after the cursor, in order.
    pub events: Vec<SseEvent>,
    /// Whether the stream's answer is among them (or it was closed without one).
    pub finished: bool,
    /// Whether the mirror knows the stream at all.
    pub known: bool,
    /// The ids of the stream's requests (none for a GET stream).
    pub ids: Vec<RequestId>,
    /// The last entry read, to read on from.
    pub last: String,
    /// The highest count of the stream seen (the cursor's, if none came after).
    pub count: u64,
    /// The highest count of the stream the mirror holds, the cursor's event included.
    pub seen: u64,
    /// Whether an event is missing between the cursor and the last taken (a mirror write
    /// dropped): the stream cannot be resumed whole.
    pub gap: bool,
    /// The ids of the stream's requests whose answers the mirror holds (the client's
    /// cursor's and before included).
    pub answered: Vec<RequestId>,
}

impl Mirrored {
    /// Takes the entries of `cursor.stream` among `entries`.
    pub(crate) fn take(&mut self, cursor: Cursor, entries: Vec<StreamEntry>) {
        // The client has everything up to its cursor: what follows it is counted from there
        // (a follower reading on goes on from `count`).
        self.count = self.count.max(cursor.count);
        for (entry_id, fields) in entries {
            self.last = entry_id;
            let field = |name: &str| {
                fields
                    .iter()
                    .find(|(key, _)| key == name)
                    .map(|(_, value)| value.as_str())
            };
            if field("s").and_then(|s| s.parse::<u64>().ok()) != Some(cursor.stream) {
                continue;
            }
            self.known = true;
            match field("k") {
                Some("b") => {
                    // Kept as their text: two integer ids beyond 64 bits would read as one
                    // float, and `1e400` as none.
                    self.ids = field("i")
                        .and_then(|ids| serde_json::from_str::<Vec<&RawValue>>(ids).ok())
                        .map(|ids| ids.into_iter().filter_map(RequestId::from_raw).collect())
                        .unwrap_or_default();
                }
                Some("e") => {
                    let Some(count) = field("c").and_then(|c| c.parse::<u64>().ok()) else {
                        continue;
                    };
                    self.seen = self.seen.max(count);
                    let data = field("d").unwrap_or_default();
                    // Answers the client has (at or before its cursor) count too: a request
                    // answered there is not owed an error when its node dies.
                    self.answered.extend(answered_ids(data));
                    let last = self.count;
                    if count > last + 1 {
                        // Nothing after a missing event is taken: the stream ends before it.
                        self.gap = true;
                        return;
                    }
                    if count > last {
                        self.count = count;
                        self.events.push(SseEvent {
                            id: format!("{}_{count}", cursor.stream),
                            data: Arc::from(data),
                        });
                    }
                }
                Some("f") => self.finished = true,
                _ => {}
            }
        }
    }
}

/// The ids of the responses in an event's data (a response, or a batch of them).
fn answered_ids(data: &str) -> impl Iterator<Item = RequestId> + '_ {
    answer_ids(data)
        .into_iter()
        .filter_map(RequestId::from_json)
}

impl Mirrored {
    /// The ids of the stream's requests whose answers the mirror does not hold.
    pub(crate) fn unanswered(&self) -> impl Iterator<Item = &RequestId> {
        self.ids.iter().filter(|id| !self.answered.contains(id))
    }

    /// Whether the mirror has caught up with what the client has (its stream's node writes
    /// a moment after it sends): it knows the stream and holds the cursor's event.
    pub(crate) fn caught_up(&self, cursor: Cursor) -> bool {
        self.known && self.seen >= cursor.count
    }

    /// Where to read on from.
    pub(crate) fn after(&self) -> &str {
        if self.last.is_empty() {
            "0"
        } else {
            &self.last
        }
    }
}

/// The node whose stream `stream` is (its number is above 32 bits, see
/// `Cluster::node_base`).
pub(crate) fn node_of(stream: u64) -> u64 {
    stream >> 32
}

/// Whether `stream` is a session's `GET` stream (bit 31, see `Cluster::next_stream`; the
/// node's base itself, as earlier versions numbered it), not a POST's: told by its number,
/// which a client's `Last-Event-ID` carries, not by the mirror's `b` entry, which the
/// mirror's bound may have dropped.
pub(crate) fn is_get_stream(stream: u64) -> bool {
    stream & (1 << 31) != 0 || stream & 0xFFFF_FFFF == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The entries held are cut to the newest within the bytes bound, never below the
    /// newest one; a cut by count alone is left to `XADD`'s own trim.
    #[test]
    fn held_entries_are_cut_to_the_bytes_bound() {
        let data = |bytes: usize| vec![("d", "x".repeat(bytes - 1))];
        let mut held = Held::new(100, 3);
        assert_eq!(held.append(&[data(40), data(40)]), None);
        assert_eq!(
            held.append(&[data(40)]),
            Some(2),
            "120 bytes: the oldest goes"
        );
        assert_eq!(held.bytes, 80);
        assert_eq!(held.append(&[data(500)]), Some(1), "the newest alone stays");
        assert_eq!(held.append(&[data(10), data(10), data(10)]), Some(3));
        assert_eq!(held.append(&[data(10)]), None, "over the count only");
        assert_eq!((held.sizes.len(), held.bytes), (3, 30));
    }

    fn entry(n: u32, fields: &[(&str, &str)]) -> StreamEntry {
        (
            format!("1-{n}"),
            fields
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }

    fn event(n: u32, stream: &str, count: &str, data: &str) -> StreamEntry {
        entry(n, &[("k", "e"), ("s", stream), ("c", count), ("d", data)])
    }

    #[test]
    fn a_missing_event_after_the_cursor_is_a_gap() {
        let cursor = Cursor {
            stream: 7,
            count: 1,
        };
        let mut whole = Mirrored::default();
        whole.take(
            cursor,
            vec![
                event(1, "7", "1", "{}"),
                event(2, "7", "2", "{}"),
                event(3, "8", "5", "{}"),
                event(4, "7", "3", "{}"),
            ],
        );
        assert!(!whole.gap);
        assert_eq!(whole.events.len(), 2);
        // Event 3 of stream 7 was dropped on its way to the mirror.
        let mut holed = Mirrored::default();
        holed.take(cursor, vec![event(1, "7", "2", "{}")]);
        assert!(!holed.gap);
        holed.take(
            cursor,
            vec![event(2, "7", "4", "{}"), event(3, "7", "5", "{}")],
        );
        assert!(holed.gap, "4 after 2");
        assert_eq!(holed.events.len(), 1, "nothing taken past the gap");
        // Or the first after the cursor.
        let mut late = Mirrored::default();
        late.take(cursor, vec![event(1, "7", "3", "{}")]);
        assert!(late.gap, "3 after the cursor's 1");
    }

    #[test]
    fn the_answers_among_the_events_are_known() {
        let cursor = Cursor {
            stream: 7,
            count: 0,
        };
        let mut mirrored = Mirrored::default();
        // The client has event 2 (the answer of 1): its cursor is past it.
        let cursor = Cursor { count: 2, ..cursor };
        mirrored.take(
            cursor,
            vec![
                entry(1, &[("k", "b"), ("s", "7"), ("i", r#"[1,"two",3]"#)]),
                event(
                    2,
                    "7",
                    "1",
                    r#"{"jsonrpc":"2.0","method":"notifications/progress"}"#,
                ),
                event(3, "7", "2", r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
                event(
                    4,
                    "7",
                    "3",
                    r#"[{"jsonrpc":"2.0","id":"two","error":{"code":1,"message":"x"}}]"#,
                ),
            ],
        );
        assert_eq!(mirrored.ids.len(), 3);
        assert_eq!(
            mirrored.answered,
            [RequestId::from_json("1"), RequestId::from_json(r#""two""#)].map(Option::unwrap),
            "3 unanswered"
        );
    }

    #[test]
    fn the_ids_are_kept_as_written() {
        let cursor = Cursor {
            stream: 7,
            count: 0,
        };
        let mut mirrored = Mirrored::default();
        mirrored.take(
            cursor,
            vec![
                entry(
                    1,
                    &[
                        ("k", "b"),
                        ("s", "7"),
                        ("i", "[18446744073709551617,18446744073709551618,1e400]"),
                    ],
                ),
                event(
                    2,
                    "7",
                    "1",
                    r#"{"jsonrpc":"2.0","id":18446744073709551618,"result":{}}"#,
                ),
            ],
        );
        fn text(ids: &[RequestId]) -> Vec<&str> {
            ids.iter().map(RequestId::as_json).collect()
        }
        assert_eq!(
            text(&mirrored.ids),
            ["18446744073709551617", "18446744073709551618", "1e400"]
        );
        assert_eq!(text(&mirrored.answered), ["18446744073709551618"]);
    }

    #[test]
    fn a_get_stream_is_told_by_its_number() {
        let base = 5 << 32;
        assert!(is_get_stream(base), "the number earlier versions gave");
        assert!(is_get_stream(base | 1 << 31 | 9));
        assert!(!is_get_stream(base | 9));
        assert_eq!(node_of(base | 1 << 31 | 9), 5);
    }
}
