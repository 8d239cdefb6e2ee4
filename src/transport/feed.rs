//! What a hosted HTTP session's stream holds for its SSE reader: the events its session
//! hands it that the reader has not taken, in a queue the session fills and can empty, and
//! the reader drains.
//!
//! A client that does not read its stream leaves its events here. They are counted in bytes,
//! per stream and for the session's streams together, and bounded: a stream that holds
//! events is refused one more past the session's budget, and its session then lets the
//! stream that holds the most go (`HttpOutlet::offer`), its events dropped at once (the
//! client resumes it from the session's log with `Last-Event-ID`). Dropped here, rather than
//! left in a channel until the client reads them or its connection ends, they give their
//! room back to the session's other streams: a stream the client reads as it comes is never
//! let go for what another one held. The queue is bounded in number too (a replay and its
//! slack), as a channel would be.
//!
//! The session's actor feeds it ([`Feed`]); the response's body, on the connection's
//! thread, drains it ([`FeedReader`]): a mutex for the two, held for a push or a pop.

use super::events::SseEvent;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

/// The live events a session's streams hold for their readers, in bytes, together, and how
/// many they may come to. One per session, shared by its streams' feeds.
#[derive(Debug)]
pub struct Budget {
    held: AtomicUsize,
    max: usize,
}

impl Budget {
    /// A budget of `max` bytes for a session's streams.
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            held: AtomicUsize::new(0),
            max,
        })
    }

    /// The bytes held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }
}

/// An event waiting for its reader, with the bytes it is counted for (0: not counted).
struct Waiting {
    event: SseEvent,
    counted: usize,
}

/// The queue between a stream's feed and its reader.
struct Queue {
    events: VecDeque<Waiting>,
    /// The counted bytes among `events`.
    held: usize,
    /// The most events it takes.
    capacity: usize,
    /// No more events come (the feed is dropped or cut): the reader ends once `events` is
    /// empty.
    ended: bool,
    /// The reader is gone.
    unread: bool,
    /// The reader took an event (see [`Feed::cut`]).
    delivered: bool,
    /// The stream was let go: no more events are taken.
    cut: bool,
    waker: Option<Waker>,
}

struct Shared {
    queue: Mutex<Queue>,
    budget: Arc<Budget>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // Nothing panics while the lock is held; a poisoned queue is still consistent.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The session's end of a stream's queue. Dropped, the stream ends after what it holds.
pub struct Feed {
    shared: Arc<Shared>,
}

/// The reader's end: the events in order, until the feed ends.
pub struct FeedReader {
    shared: Arc<Shared>,
}

/// A stream's queue taking at most `capacity` events, counted in `budget`.
pub fn feed(capacity: usize, budget: Arc<Budget>) -> (Feed, FeedReader) {
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue {
            events: VecDeque::new(),
            held: 0,
            capacity,
            ended: false,
            unread: false,
            delivered: false,
            cut: false,
            waker: None,
        }),
        budget,
    });
    (
        Feed {
            shared: shared.clone(),
        },
        FeedReader { shared },
    )
}

/// An event's size in the budget.
fn size(event: &SseEvent) -> usize {
    event.data.len() + event.id.len()
}

/// Why a feed did not take an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Its reader is gone, or the stream was let go.
    Unread,
    /// It holds its most events.
    Full,
    /// It holds events and the session's streams hold their most bytes.
    OverBudget,
}

impl Feed {
    /// Queues an event without counting it: one the session holds anyway (a replay from its
    /// log or its mirror, a priming event). False when the queue has no room or no reader.
    pub fn push_uncounted(&self, event: SseEvent) -> bool {
        self.push(event, false).is_ok()
    }

    /// Queues a live event, counted in the session's budget. It is refused when the reader
    /// is gone, the queue holds its most events, or it holds events and the event would take
    /// the session's streams past their budget: a stream that holds none always takes its
    /// next event (so one read as it comes is never refused for what others hold, and each
    /// stream's first event, with an id to resume from, reaches its reader). The event comes
    /// back with a refusal.
    pub fn offer(&self, event: SseEvent) -> Result<(), (Refused, SseEvent)> {
        self.push(event, true)
    }

    fn push(&self, event: SseEvent, counted: bool) -> Result<(), (Refused, SseEvent)> {
        let mut queue = self.shared.lock();
        if queue.unread || queue.cut {
            return Err((Refused::Unread, event));
        }
        if queue.events.len() >= queue.capacity {
            return Err((Refused::Full, event));
        }
        let budget = &self.shared.budget;
        let counted = if counted { size(&event) } else { 0 };
        if counted > 0 && queue.held > 0 && budget.held().saturating_add(counted) > budget.max {
            return Err((Refused::OverBudget, event));
        }
        budget.held.fetch_add(counted, Ordering::Relaxed);
        queue.held += counted;
        queue.events.push_back(Waiting { event, counted });
        if let Some(waker) = queue.waker.take() {
            waker.wake();
        }
        Ok(())
    }

    /// The counted bytes it holds.
    pub fn held(&self) -> usize {
        self.shared.lock().held
    }

    /// Whether its reader is gone, or the stream was let go (by its [`FeedHandle`]).
    pub fn is_unread(&self) -> bool {
        let queue = self.shared.lock();
        queue.unread || queue.cut
    }

    /// Lets the stream go: what it holds is dropped now (its bytes given back to the
    /// session), and its reader ends. A reader that has taken nothing yet keeps its first
    /// event: its client then has an event id to resume the stream from (a session of a
    /// version without priming events had none, and lost the stream's answer; review 51 #3).
    pub fn cut(self) {
        self.handle().cut();
    }

    /// A handle to let the stream go by, for a feed another task owns (a stream followed
    /// from another node's mirror).
    pub fn handle(&self) -> FeedHandle {
        FeedHandle {
            shared: self.shared.clone(),
        }
    }
}

/// What lets a stream go whose [`Feed`] another task owns.
pub struct FeedHandle {
    shared: Arc<Shared>,
}

impl FeedHandle {
    /// The counted bytes it holds.
    pub fn held(&self) -> usize {
        self.shared.lock().held
    }

    /// Whether the stream is over: let go, its reader gone, or ended with nothing left.
    pub fn is_over(&self) -> bool {
        let queue = self.shared.lock();
        queue.cut || queue.unread || (queue.ended && queue.events.is_empty())
    }

    /// As [`Feed::cut`]: the feed takes no more events.
    pub fn cut(&self) {
        let mut queue = self.shared.lock();
        let mut dropped = std::mem::take(&mut queue.events);
        if !queue.delivered {
            if let Some(first) = dropped.pop_front() {
                queue.events.push_back(first);
            }
        }
        let given_back: usize = dropped.iter().map(|waiting| waiting.counted).sum();
        queue.held -= given_back;
        self.shared
            .budget
            .held
            .fetch_sub(given_back, Ordering::Relaxed);
        queue.cut = true;
        queue.ended = true;
        if let Some(waker) = queue.waker.take() {
            waker.wake();
        }
        drop(queue);
        // The events are freed outside the lock.
        drop(dropped);
    }
}

impl Feed {
    /// No more events come: the reader ends after what the queue holds. The feed may still
    /// let the stream go ([`cut`](Self::cut)) until its reader has taken them.
    pub fn end(&self) {
        let mut queue = self.shared.lock();
        queue.ended = true;
        if let Some(waker) = queue.waker.take() {
            waker.wake();
        }
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.end();
    }
}

impl futures_util::Stream for FeedReader {
    type Item = SseEvent;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<SseEvent>> {
        let mut queue = self.shared.lock();
        if let Some(waiting) = queue.events.pop_front() {
            queue.delivered = true;
            queue.held -= waiting.counted;
            self.shared
                .budget
                .held
                .fetch_sub(waiting.counted, Ordering::Relaxed);
            return Poll::Ready(Some(waiting.event));
        }
        if queue.ended {
            return Poll::Ready(None);
        }
        crate::remember_waker(&mut queue.waker, cx.waker());
        Poll::Pending
    }
}

impl Drop for FeedReader {
    fn drop(&mut self) {
        let mut queue = self.shared.lock();
        queue.unread = true;
        let dropped = std::mem::take(&mut queue.events);
        self.shared
            .budget
            .held
            .fetch_sub(std::mem::take(&mut queue.held), Ordering::Relaxed);
        drop(queue);
        drop(dropped);
    }
}

impl std::fmt::Debug for FeedReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let queue = self.shared.lock();
        f.debug_struct("FeedReader")
            .field("events", &queue.events.len())
            .field("held", &queue.held)
            .field("ended", &queue.ended)
            .finish()
    }
}

impl FeedReader {
    /// A reader of nothing: a stream that ends at once.
    pub fn ended() -> Self {
        let (_, reader) = feed(0, Budget::new(0));
        reader
    }
}

#[cfg(test)]
mod tests {
    use super::{feed, Budget, Refused};
    use crate::transport::events::SseEvent;
    use futures_util::StreamExt;
    use std::sync::Arc;

    /// Why `result` refused, if it did.
    fn refused<T>(result: Result<T, (Refused, SseEvent)>) -> Result<T, Refused> {
        result.map_err(|(why, _)| why)
    }

    fn event(id: &str, bytes: usize) -> SseEvent {
        SseEvent {
            id: id.to_owned(),
            data: Arc::from("x".repeat(bytes)),
        }
    }

    #[tokio::test]
    async fn a_stream_holding_nothing_takes_its_next_event_whatever_the_others_hold() {
        // Each event is 1 + 10 bytes; the budget holds two.
        let budget = Budget::new(22);
        let (unread, mut unread_reader) = feed(16, budget.clone());
        let (read, mut reader) = feed(16, budget.clone());
        assert_eq!(refused(unread.offer(event("a", 10))), Ok(()));
        assert_eq!(
            unread_reader.next().await.map(|e| e.id),
            Some("a".to_owned())
        );
        assert_eq!(refused(unread.offer(event("b", 10))), Ok(()));
        assert_eq!(refused(unread.offer(event("c", 10))), Ok(()));
        assert_eq!(
            refused(unread.offer(event("x", 10))),
            Err(Refused::OverBudget)
        );
        // The other stream holds none: it takes one, past the budget, and one more once
        // its reader took it.
        assert_eq!(refused(read.offer(event("d", 10))), Ok(()));
        assert_eq!(
            refused(read.offer(event("e", 10))),
            Err(Refused::OverBudget)
        );
        assert_eq!(reader.next().await.map(|e| e.id), Some("d".to_owned()));
        assert_eq!(refused(read.offer(event("e", 10))), Ok(()));
        assert_eq!(budget.held(), 33);
        // Cut, the unread stream's bytes are back at once (its reader took an event: it
        // keeps none).
        unread.cut();
        assert_eq!(budget.held(), 11);
        assert!(unread_reader.next().await.is_none());
        assert_eq!(refused(read.offer(event("f", 10))), Ok(()));
        assert_eq!(read.held(), 22);
    }

    #[tokio::test]
    async fn a_cut_stream_ends_at_once_and_a_dropped_feed_after_what_it_holds() {
        let budget = Budget::new(1000);
        let (cut, mut cut_reader) = feed(16, budget.clone());
        assert_eq!(refused(cut.offer(event("a", 10))), Ok(()));
        assert_eq!(cut_reader.next().await.map(|e| e.id), Some("a".to_owned()));
        assert_eq!(refused(cut.offer(event("b", 10))), Ok(()));
        assert!(cut.push_uncounted(event("c", 10)));
        cut.cut();
        assert!(cut_reader.next().await.is_none());
        let (ended, mut reader) = feed(16, budget.clone());
        assert_eq!(refused(ended.offer(event("d", 10))), Ok(()));
        drop(ended);
        assert_eq!(reader.next().await.map(|e| e.id), Some("d".to_owned()));
        assert!(reader.next().await.is_none());
        assert_eq!(budget.held(), 0);
    }

    #[tokio::test]
    async fn a_stream_cut_before_its_reader_took_anything_keeps_its_first_event() {
        let budget = Budget::new(1000);
        let (cut, mut reader) = feed(16, budget.clone());
        assert_eq!(refused(cut.offer(event("first", 10))), Ok(()));
        assert_eq!(refused(cut.offer(event("second", 10))), Ok(()));
        cut.cut();
        // The first, with its id to resume from, is still counted until it is read.
        assert_eq!(budget.held(), 15);
        assert_eq!(reader.next().await.map(|e| e.id), Some("first".to_owned()));
        assert!(reader.next().await.is_none());
        assert_eq!(budget.held(), 0);
    }

    #[tokio::test]
    async fn a_stream_let_go_by_its_handle_refuses_what_its_feed_offers_after() {
        let budget = Budget::new(1000);
        let (followed, mut reader) = feed(16, budget.clone());
        let handle = followed.handle();
        assert_eq!(refused(followed.offer(event("a", 10))), Ok(()));
        assert_eq!(reader.next().await.map(|e| e.id), Some("a".to_owned()));
        assert_eq!(refused(followed.offer(event("b", 10))), Ok(()));
        assert!(!handle.is_over());
        handle.cut();
        assert!(handle.is_over());
        assert_eq!(budget.held(), 0);
        // Its owner (the follower) is told as for a reader gone, and stops.
        assert_eq!(
            refused(followed.offer(event("c", 10))),
            Err(Refused::Unread)
        );
        assert!(reader.next().await.is_none());
    }

    #[test]
    fn a_gone_reader_gives_its_bytes_back_and_refuses_more() {
        let budget = Budget::new(1000);
        let (feed_, reader) = feed(1, budget.clone());
        assert_eq!(refused(feed_.offer(event("a", 10))), Ok(()));
        assert_eq!(refused(feed_.offer(event("b", 10))), Err(Refused::Full));
        assert!(!feed_.is_unread());
        drop(reader);
        assert!(feed_.is_unread());
        assert_eq!(budget.held(), 0);
        assert_eq!(refused(feed_.offer(event("c", 10))), Err(Refused::Unread));
        // Uncounted events are never in the budget.
        let (feed_, _reader) = feed(4, budget.clone());
        assert!(feed_.push_uncounted(event("d", 10)));
        assert_eq!(budget.held(), 0);
    }
}
