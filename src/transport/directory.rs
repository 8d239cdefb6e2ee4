//! The sessions a client can reach again by the id it holds, one directory per kind of
//! actor: hosted sessions (HTTP, and WebSocket sessions parked for a reconnect) and WebSocket
//! sessions with their socket (a reconnect takes the session over). Each entry remembers
//! whose session it is: a lookup by anyone else, or by a credential of the same principal
//! that grants less ([`Owner::admits`]), finds nothing, as for an id that never existed.

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

    /// The actor of the session `id` if there is one (and `requester` may use it), else the
    /// one `make` makes, remembered as `owner`'s (the session's, which `requester` was found
    /// to be admitted by): two requests taking up the same session at once get the same
    /// actor, where each made its own and the later one hid the earlier. `make` runs under
    /// the directory's lock of that id: it must not use the directory.
    pub fn find_or_make(
        &self,
        id: SessionId,
        requester: &Owner,
        owner: &Owner,
        make: impl FnOnce(&SessionId) -> Option<Addr<A>>,
    ) -> Option<Addr<A>> {
        match self.entries.entry(id) {
            dashmap::Entry::Occupied(entry) => {
                let (actor, its_owner) = entry.get();
                its_owner.admits(requester).then(|| actor.clone())
            }
            dashmap::Entry::Vacant(entry) => {
                let actor = make(entry.key())?;
                entry.insert((actor.clone(), owner.clone()));
                Some(actor)
            }
        }
    }

    /// The actor of the session with this id, if it is live and `requester` may use it
    /// (anyone else is told there is no such session).
    pub fn find(&self, id: &str, requester: &Owner) -> Option<Addr<A>> {
        self.entries
            .get(id)
            .filter(|entry| entry.value().1.admits(requester))
            .map(|entry| entry.value().0.clone())
    }

    /// The actor of the session with this id, whoever's it is: for messages between nodes
    /// about a session, never for a client's request.
    pub fn find_any(&self, id: &str) -> Option<Addr<A>> {
        self.entries.get(id).map(|entry| entry.value().0.clone())
    }

    /// Every actor it holds, for a message to all of them (a copy of the addresses is taken
    /// first: sending holds no lock of the directory).
    pub fn actors(&self) -> Vec<Addr<A>> {
        self.entries
            .iter()
            .map(|entry| entry.value().0.clone())
            .collect()
    }

    /// Whether it holds no actor.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Forgets a session's id (it ended, or its actor let go of it), if `actor` is the one
    /// remembered under it: another actor may have taken the session over meanwhile.
    pub fn forget(&self, id: &SessionId, actor: &Addr<A>) {
        self.entries
            .remove_if(id, |_, (remembered, _)| remembered == actor);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{Identity, Proof};

    struct Nobody;

    impl Actor for Nobody {
        type Context = actix::Context<Self>;
    }

    fn owner(name: &str) -> Owner {
        Owner::new(
            &Identity::proven(Proof::ApiKey, name, Vec::new()),
            crate::perimeter::Access::default(),
        )
    }

    #[actix_rt::test]
    async fn a_session_taken_up_again_gets_the_actor_made_first() {
        let directory = Directory::<Nobody>::default();
        let id = SessionId::from_client("s-1");
        let first = directory
            .find_or_make(id.clone(), &owner("alice"), &owner("alice"), |_| {
                Some(Nobody.start())
            })
            .expect("made");
        // The second taker finds the first's actor: it makes none.
        let second = directory.find_or_make(id.clone(), &owner("alice"), &owner("alice"), |_| {
            panic!("a second actor made for the same session")
        });
        assert_eq!(second.as_ref(), Some(&first));
        // Anyone else finds nothing, as for an id that never existed.
        assert!(directory
            .find_or_make(id.clone(), &owner("mallory"), &owner("mallory"), |_| {
                Some(Nobody.start())
            })
            .is_none());
        assert_eq!(directory.find("s-1", &owner("alice")), Some(first.clone()));
    }

    #[actix_rt::test]
    async fn an_actor_forgets_its_own_entry_only() {
        let directory = Directory::<Nobody>::default();
        let id = SessionId::from_client("s-2");
        let old = Nobody.start();
        let new = Nobody.start();
        directory.remember(id.clone(), new.clone(), owner("alice"));
        // The actor the session was taken over from lets go after the new one took it.
        directory.forget(&id, &old);
        assert_eq!(directory.find("s-2", &owner("alice")), Some(new.clone()));
        directory.forget(&id, &new);
        assert_eq!(directory.find("s-2", &owner("alice")), None);
    }
}
