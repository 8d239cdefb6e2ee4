//! The sessions a client can reach again by the id it holds, one directory per kind of
//! actor: hosted sessions (HTTP, and WebSocket sessions parked for a reconnect) and WebSocket
//! sessions with their socket (a reconnect takes the session over). Each entry remembers
//! whose session it is: a lookup by anyone else finds nothing, as for an id that never
//! existed.

use crate::perimeter::Owner;
use crate::session::shared::SessionId;
use actix::{Actor, Addr};
use dashmap::DashMap;

/// The actors of kind `A` by the session id their client holds. See the module docs.
pub struct Directory<A: Actor> {
    entries: DashMap<SessionId, (Addr<A>, Owner)>,
}

impl<A: Actor> Default for Directory<A> {
    fn default() -> Self {
        Self {
            entries: DashMap::new(),
        }
    }
}

impl<A: Actor> Directory<A> {
    /// Makes the session `actor` of `owner` reachable by its id.
    pub fn remember(&self, id: SessionId, actor: Addr<A>, owner: Owner) {
        self.entries.insert(id, (actor, owner));
    }

    /// The actor of the session with this id, if it is live and `owner`'s (anyone else is
    /// told there is no such session).
    pub fn find(&self, id: &str, owner: &Owner) -> Option<Addr<A>> {
        self.entries
            .get(id)
            .filter(|entry| entry.value().1 == *owner)
            .map(|entry| entry.value().0.clone())
    }

    /// The actor of the session with this id, whoever's it is: for messages between nodes
    /// about a session, never for a client's request.
    pub fn find_any(&self, id: &str) -> Option<Addr<A>> {
        self.entries.get(id).map(|entry| entry.value().0.clone())
    }

    /// Forgets a session's id (it ended, or its actor let go of it).
    pub fn forget(&self, id: &SessionId) {
        self.entries.remove(id);
    }
}
