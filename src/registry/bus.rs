//! The change bus: registry changes (a tool, resource, template or prompt added, removed,
//! enabled or disabled) and resource updates (a watched file changed) travel from whoever
//! makes them to every session that must hear of them.
//!
//! The writer publishes into a bounded `tokio::sync::broadcast` channel and returns: it never
//! waits on sessions. Each server thread (actix arbiter) runs one fan-out task per bus, which
//! marks the inboxes of that thread's sessions: a list change sets a bit, a resource update
//! marks the URI for the sessions subscribed to it. A session looks at its marks when it next
//! runs and sends one `notifications/*/list_changed` per list and one
//! `notifications/resources/updated` per URI, however many changes piled up in between:
//! bursts are coalesced per session, and no session's request path ever waits for the fan-out.
//! If a thread's fan-out falls more than the channel's capacity behind, it marks everything
//! changed on that thread (a spurious notification rather than a lost one).

use crate::mailbox::inbox::{Changes, Inbox, TaskNote};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::broadcast;

/// How many events a slow thread may fall behind before it marks everything changed.
const CAPACITY: usize = 1024;

/// Who sees a view, owned: a session (by its server-unique id) or an identity (by its
/// principal). The bus marks a view's change on its viewer's sessions only.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Viewer {
    /// A session, by its server-unique id ([`SessionScope::id`](crate::context::SessionScope::id)).
    Session(u64),
    /// The 2026-07-28 requests of an identity, by its principal.
    Identity(Arc<str>),
}

/// One change, as published.
#[derive(Debug, Clone, PartialEq)]
pub enum BusEvent {
    /// These lists changed.
    Lists(Changes),
    /// The resource at this URI changed.
    ResourceUpdated(Arc<str>),
    /// A task's status was stored (2026-07-28 tasks extension).
    Task(Arc<TaskNote>),
    /// What one viewer sees of these lists changed (its views: this node only).
    View(Viewer, Changes),
    /// This node's bridge to the other nodes was down a while (its bus subscription): the
    /// statuses of tasks may have been missed, and the sessions whose listen streams follow
    /// tasks read their records again (this node only).
    TasksMissed,
    /// The resource at this URI of one viewer's own child changed (its child: this node
    /// only).
    ViewUpdated(Viewer, Arc<str>),
}

/// Receives what is published on the bus besides the local sessions (the bridge to other
/// nodes).
pub trait BusObserver: Send + Sync + 'static {
    /// Called on the publishing thread; must not block.
    fn published(&self, event: &BusEvent);
}

/// The change bus of one server. Cloning gives another handle to the same bus.
#[derive(Clone)]
pub struct ChangeBus {
    inner: Arc<BusInner>,
}

struct BusInner {
    id: u64,
    sender: broadcast::Sender<BusEvent>,
    observer: std::sync::OnceLock<Box<dyn BusObserver>>,
}

static NEXT_BUS_ID: AtomicU64 = AtomicU64::new(1);

impl Default for ChangeBus {
    fn default() -> Self {
        Self {
            inner: Arc::new(BusInner {
                id: NEXT_BUS_ID.fetch_add(1, Ordering::Relaxed),
                sender: broadcast::channel(CAPACITY).0,
                observer: std::sync::OnceLock::new(),
            }),
        }
    }
}

impl ChangeBus {
    /// Publishes a change to every session of this node, and to the observer (other nodes).
    /// Never blocks.
    pub fn publish(&self, event: BusEvent) {
        if let Some(observer) = self.inner.observer.get() {
            observer.published(&event);
        }
        self.publish_local(event);
    }

    /// Publishes a change to this node's sessions only (a change that came from another node).
    pub fn publish_local(&self, event: BusEvent) {
        // An error only means no thread has a session yet: nobody to tell.
        let _ = self.inner.sender.send(event);
    }

    /// Sets the observer of published changes (once).
    pub fn set_observer(&self, observer: Box<dyn BusObserver>) {
        let _ = self.inner.observer.set(observer);
    }

    /// Registers a session's inbox on the current thread until the returned registration is
    /// dropped; `viewer` is whose views the session sees (their changes reach it). Starts
    /// this thread's fan-out task if it has none.
    pub(crate) fn attach(&self, inbox: &Rc<Inbox>, viewer: Viewer) -> BusRegistration {
        self.register(inbox, viewer, true)
    }

    /// Registers a session's inbox for the changes of `viewer`'s views only (`View`,
    /// `ViewUpdated`), beside its registration by [`attach`](Self::attach): a connection
    /// that speaks both eras sees its session's views and, for its 2026-07-28 listens, its
    /// identity's, and is told of every other change once.
    pub(crate) fn attach_views(&self, inbox: &Rc<Inbox>, viewer: Viewer) -> BusRegistration {
        self.register(inbox, viewer, false)
    }

    fn register(&self, inbox: &Rc<Inbox>, viewer: Viewer, everything: bool) -> BusRegistration {
        let id = self.inner.id;
        let slot = LOCAL.with(|local| {
            let mut local = local.borrow_mut();
            let set = local.entry(id).or_insert_with(|| {
                let receiver = self.inner.sender.subscribe();
                actix_rt::spawn(fan_out(id, receiver));
                LocalSessions::default()
            });
            set.insert(Rc::downgrade(inbox), viewer, everything)
        });
        BusRegistration { bus: id, slot }
    }
}

/// A session's place in its thread's fan-out; removed on drop.
pub struct BusRegistration {
    bus: u64,
    slot: usize,
}

impl Drop for BusRegistration {
    fn drop(&mut self) {
        // `try_with`: during thread teardown the table may already be gone.
        let _ = LOCAL.try_with(|local| {
            if let Ok(mut local) = local.try_borrow_mut() {
                if let Some(set) = local.get_mut(&self.bus) {
                    set.remove(self.slot);
                }
            }
        });
    }
}

/// The sessions of one bus on one thread, each with whose views it sees, and whether it is
/// told of every change (else of that viewer's views only: [`ChangeBus::attach_views`]).
#[derive(Default)]
struct LocalSessions {
    slots: Vec<Option<(Weak<Inbox>, Viewer, bool)>>,
    free: Vec<usize>,
}

impl LocalSessions {
    fn insert(&mut self, inbox: Weak<Inbox>, viewer: Viewer, everything: bool) -> usize {
        match self.free.pop() {
            Some(slot) => {
                self.slots[slot] = Some((inbox, viewer, everything));
                slot
            }
            None => {
                self.slots.push(Some((inbox, viewer, everything)));
                self.slots.len() - 1
            }
        }
    }

    fn remove(&mut self, slot: usize) {
        if let Some(entry) = self.slots.get_mut(slot) {
            if entry.take().is_some() {
                self.free.push(slot);
            }
        }
    }

    fn each(&self, mut f: impl FnMut(&Inbox)) {
        let everything = self.slots.iter().flatten().filter(|(_, _, all)| *all);
        for (inbox, _, _) in everything {
            if let Some(inbox) = inbox.upgrade() {
                f(&inbox);
            }
        }
    }

    /// The sessions that see `viewer`'s views.
    fn each_of(&self, viewer: &Viewer, mut f: impl FnMut(&Inbox)) {
        for (inbox, _, _) in self.slots.iter().flatten().filter(|(_, v, _)| v == viewer) {
            if let Some(inbox) = inbox.upgrade() {
                f(&inbox);
            }
        }
    }
}

thread_local! {
    static LOCAL: RefCell<HashMap<u64, LocalSessions>> = RefCell::new(HashMap::new());
}

/// One thread's fan-out of one bus: marks the inboxes of the thread's sessions.
async fn fan_out(bus: u64, mut receiver: broadcast::Receiver<BusEvent>) {
    loop {
        let event = receiver.recv().await;
        let done = LOCAL.with(|local| {
            let local = local.borrow();
            let Some(sessions) = local.get(&bus) else {
                return true;
            };
            match &event {
                Ok(BusEvent::Lists(changes)) => sessions.each(|inbox| inbox.mark_changed(*changes)),
                Ok(BusEvent::ResourceUpdated(uri)) => sessions.each(|inbox| {
                    inbox.mark_updated(uri);
                }),
                Ok(BusEvent::Task(note)) => sessions.each(|inbox| {
                    inbox.mark_task(note);
                }),
                Ok(BusEvent::TasksMissed) => sessions.each(Inbox::mark_tasks_missed),
                Ok(BusEvent::View(viewer, changes)) => {
                    sessions.each_of(viewer, |inbox| inbox.mark_changed(*changes))
                }
                Ok(BusEvent::ViewUpdated(viewer, uri)) => sessions.each_of(viewer, |inbox| {
                    inbox.mark_updated(uri);
                }),
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::warn!(
                        missed,
                        "change fan-out fell behind; marking everything changed"
                    );
                    sessions.each(|inbox| {
                        inbox.mark_changed(Changes::ALL);
                        inbox.mark_all_subscriptions_updated();
                    });
                }
                Err(broadcast::error::RecvError::Closed) => return true,
            }
            false
        });
        if done {
            LOCAL.with(|local| local.borrow_mut().remove(&bus));
            return;
        }
    }
}
