//! The budget of partly received messages: bytes a client has sent of a message the server
//! cannot act on yet (a WebSocket frame or fragmented message being reassembled, an HTTP body
//! being read). `limits.max_message_bytes` bounds one message; this bounds all of them
//! together, across every connection of the server (`limits.max_partial_bytes`), so that many
//! clients each holding an unfinished message cannot make the server hold gigabytes.
//!
//! A connection holds a [`Reservation`]: it grows as bytes arrive (refused past the budget)
//! and shrinks as messages complete; dropping it (the message done, the connection gone,
//! however it ended) gives its bytes back, so no path can leak them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The server's budget of partly received bytes; see the module docs.
#[derive(Debug)]
pub struct PartialBudget {
    limit: usize,
    used: AtomicUsize,
}

/// The budget is spent: the message that asked for more cannot be received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverBudget;

impl PartialBudget {
    /// A budget of `limit` bytes, none in use.
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            used: AtomicUsize::new(0),
        })
    }

    /// Bytes reserved now, by all connections (the tests watch it come back to 0).
    #[cfg(any(test, feature = "testing"))]
    pub fn in_use(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// An empty reservation against this budget.
    pub fn reservation(self: &Arc<Self>) -> Reservation {
        Reservation {
            budget: self.clone(),
            held: 0,
        }
    }

    /// Takes `bytes` more, unless that would pass the limit.
    fn take(&self, bytes: usize) -> Result<(), OverBudget> {
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|&total| total <= self.limit)
            })
            .map(|_| ())
            .map_err(|_| OverBudget)
    }

    fn give_back(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// One connection's share of the [`PartialBudget`]; given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<PartialBudget>,
    held: usize,
}

impl Reservation {
    /// Holds exactly `bytes`: takes the difference from the budget when they are more than
    /// held (refused, holding what it held, when the budget has not that much left), gives
    /// it back when they are fewer.
    pub fn hold(&mut self, bytes: usize) -> Result<(), OverBudget> {
        if bytes == self.held {
            // The common case between frames: nothing to tell the shared counter.
            return Ok(());
        }
        if bytes > self.held {
            self.budget.take(bytes - self.held)?;
        } else {
            self.budget.give_back(self.held - bytes);
        }
        self.held = bytes;
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.give_back(self.held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_share_the_limit_and_give_back_when_dropped() {
        let budget = PartialBudget::new(100);
        let mut a = budget.reservation();
        let mut b = budget.reservation();
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
}
