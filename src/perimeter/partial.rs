//! The budget of partly received messages: bytes a client has sent of a message the server
//! cannot act on yet (a WebSocket frame or fragmented message being reassembled, an HTTP body
//! being read). `limits.max_message_bytes` bounds one message; this bounds all of them
//! together, across every connection of the server (`limits.max_partial_bytes`), so that many
//! clients each holding an unfinished message cannot make the server hold gigabytes.
//!
//! Each client address also has a share of it (`limits.max_partial_bytes_per_ip`, by default an
//! eighth, at least one message), so that one client's many connections cannot take the whole
//! budget and make every other client's next message wait (a 40-byte ping was refused with
//! 1009 while 364 connections of one address held the budget). A WebSocket connection counts
//! in it from its first byte (its address's count found once); an HTTP body from the moment
//! it waits for more of itself ([`Reservation::count_in`]): a body that arrives whole at
//! once is not looked up, as finding the count for every request costs a map entry (about
//! 800 instructions of a 68,000-instruction 2026-07-28 POST).
//!
//! A connection holds a [`Reservation`]: it grows as bytes arrive (refused past the budget)
//! and shrinks as messages complete; dropping it (the message done, the connection gone,
//! however it ended) gives its bytes back, so no path can leak them.

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The server's budget of partly received bytes; see the module docs.
#[derive(Debug)]
pub struct PartialBudget {
    limit: usize,
    used: AtomicUsize,
    /// What the connections of one client address may hold of it together (0: no share), so
    /// that one client cannot take the whole budget from every other.
    per_client: usize,
    /// Each address's count, shared by its reservations (made once a connection or body).
    by_client: dashmap::DashMap<IpAddr, Arc<ClientCount>>,
}

/// What the connections of one client address hold now.
#[derive(Debug)]
struct ClientCount {
    address: IpAddr,
    bytes: AtomicUsize,
}

/// The budget is spent (the server's, or the client address's share): the message that asked
/// for more cannot be received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverBudget;

impl PartialBudget {
    /// A budget of `limit` bytes, none in use, `per_client` of them for each client address
    /// (0: no share).
    pub fn new(limit: usize, per_client: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            used: AtomicUsize::new(0),
            per_client,
            by_client: dashmap::DashMap::new(),
        })
    }

    /// Bytes reserved now, by all connections (the tests watch it come back to 0).
    #[cfg(any(test, feature = "testing"))]
    pub fn in_use(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// An empty reservation against this budget, for a connection of the client `client`
    /// (its address as the session limits count it; `None`: the budget alone).
    pub fn reservation(self: &Arc<Self>, client: Option<IpAddr>) -> Reservation {
        Reservation {
            budget: self.clone(),
            held: 0,
            client: client.and_then(|address| self.count_of(address)),
        }
    }

    /// The count of `address`'s reservations (made with the first), `None` without shares.
    fn count_of(&self, address: IpAddr) -> Option<Arc<ClientCount>> {
        (self.per_client > 0).then(|| {
            self.by_client
                .entry(address)
                .or_insert_with(|| {
                    Arc::new(ClientCount {
                        address,
                        bytes: AtomicUsize::new(0),
                    })
                })
                .clone()
        })
    }

    /// Takes `bytes` more of `counter`, unless that would pass `limit`.
    fn take(counter: &AtomicUsize, limit: usize, bytes: usize) -> Result<(), OverBudget> {
        counter
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|&total| total <= limit)
            })
            .map(|_| ())
            .map_err(|_| OverBudget)
    }
}

/// One connection's share of the [`PartialBudget`]; given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<PartialBudget>,
    held: usize,
    /// Its client's count (one pointer: a connection's reader stays within its allocator
    /// class, benches/README.md "An idle session's actor in 1 KiB").
    client: Option<Arc<ClientCount>>,
}

impl Reservation {
    /// Holds exactly `bytes`: takes the difference from the budget (and its client's share)
    /// when they are more than held (refused, holding what it held, when either has not that
    /// much left), gives it back when they are fewer.
    pub fn hold(&mut self, bytes: usize) -> Result<(), OverBudget> {
        if bytes == self.held {
            // The common case between frames: nothing to tell the shared counters.
            return Ok(());
        }
        let budget = &*self.budget;
        if bytes > self.held {
            let more = bytes - self.held;
            if let Some(client) = &self.client {
                PartialBudget::take(&client.bytes, budget.per_client, more)?;
            }
            if let Err(over) = PartialBudget::take(&budget.used, budget.limit, more) {
                if let Some(client) = &self.client {
                    client.bytes.fetch_sub(more, Ordering::Relaxed);
                }
                return Err(over);
            }
        } else {
            self.give_back(self.held - bytes);
        }
        self.held = bytes;
        Ok(())
    }

    /// Counts what this reservation holds, and will hold, in `address`'s share from now on
    /// (an HTTP body is counted in it once it waits for more of itself: looking the address
    /// up for every request's body would cost each request a map entry).
    ///
    /// # Errors
    /// [`OverBudget`] when what it holds does not fit in the address's share. Then nothing
    /// is taken from the share, and what the reservation held is given back to the
    /// server-wide budget too (it holds nothing after): the message is to be refused.
    pub fn count_in(&mut self, address: IpAddr) -> Result<(), OverBudget> {
        if self.client.is_some() {
            return Ok(());
        }
        let Some(client) = self.budget.count_of(address) else {
            return Ok(());
        };
        let taken = PartialBudget::take(&client.bytes, self.budget.per_client, self.held);
        // Kept either way: its drop forgets the address when no other holds it.
        self.client = Some(client);
        if taken.is_err() {
            // What it holds stays out of the share; the caller refuses the message.
            self.budget.used.fetch_sub(self.held, Ordering::Relaxed);
            self.held = 0;
        }
        taken
    }

    fn give_back(&self, bytes: usize) {
        self.budget.used.fetch_sub(bytes, Ordering::Relaxed);
        if let Some(client) = &self.client {
            client.bytes.fetch_sub(bytes, Ordering::Relaxed);
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.give_back(self.held);
        // The address's last reservation forgets it (the map holds it, and this one).
        if let Some(client) = self.client.take() {
            let address = client.address;
            drop(client);
            self.budget
                .by_client
                .remove_if(&address, |_, count| Arc::strong_count(count) == 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_share_the_limit_and_give_back_when_dropped() {
        let budget = PartialBudget::new(100, 0);
        let mut a = budget.reservation(None);
        let mut b = budget.reservation(None);
        assert_eq!(a.hold(60), Ok(()));
        assert_eq!(b.hold(41), Err(OverBudget));
        assert_eq!(budget.in_use(), 60, "a refused hold takes nothing");
        assert_eq!(b.hold(40), Ok(()));
        assert_eq!(a.hold(10), Ok(()), "shrinking gives back");
        assert_eq!(budget.in_use(), 50);
        drop(a);
        assert_eq!(budget.in_use(), 40);
        drop(b);
        assert_eq!(budget.in_use(), 0);
    }

    #[test]
    fn one_address_holds_no_more_than_its_share() {
        let budget = PartialBudget::new(100, 40);
        let here: IpAddr = [127, 0, 0, 1].into();
        let elsewhere: IpAddr = [127, 0, 0, 2].into();
        let (mut a, mut b) = (
            budget.reservation(Some(here)),
            budget.reservation(Some(here)),
        );
        assert_eq!(a.hold(30), Ok(()));
        assert_eq!(b.hold(11), Err(OverBudget), "past the address's share");
        assert_eq!(budget.in_use(), 30, "a refused hold takes nothing");
        assert_eq!(b.hold(10), Ok(()));
        let mut other = budget.reservation(Some(elsewhere));
        assert_eq!(other.hold(40), Ok(()), "another address has its own");
        let mut fourth = budget.reservation(Some([127, 0, 0, 3].into()));
        assert_eq!(fourth.hold(21), Err(OverBudget), "past the whole budget");
        assert_eq!(fourth.hold(20), Ok(()));
        drop((a, b, other, fourth));
        assert_eq!(budget.in_use(), 0);
        assert!(budget.by_client.is_empty(), "every address forgotten");
    }

    #[test]
    fn a_reservation_counted_in_its_address_later_brings_what_it_holds() {
        let budget = PartialBudget::new(1000, 100);
        let here: IpAddr = [127, 0, 0, 1].into();
        let mut early = budget.reservation(Some(here));
        assert_eq!(early.hold(60), Ok(()));
        let mut late = budget.reservation(None);
        assert_eq!(late.hold(30), Ok(()), "not counted in the share yet");
        assert_eq!(late.count_in(here), Ok(()), "60 + 30 fit in 100");
        assert_eq!(late.hold(41), Err(OverBudget), "60 + 41 do not");
        let mut third = budget.reservation(None);
        assert_eq!(third.hold(20), Ok(()));
        assert_eq!(third.count_in(here), Err(OverBudget), "90 + 20 do not fit");
        assert_eq!(budget.in_use(), 90, "the refused one gave its bytes back");
        drop((early, late, third));
        assert_eq!(budget.in_use(), 0);
        assert!(budget.by_client.is_empty());
    }
}
