//! The server's budget of what sessions hold for replay (`limits.max_replay_bytes`): the events
//! of every HTTP session's SSE log ([`EventLog`](crate::transport::events::EventLog), for
//! `Last-Event-ID`) and the messages every parked WebSocket session keeps for its reconnect
//! ([`hosted`](crate::transport::hosted)). Each session bounds its own, by count and by bytes
//! (and its log by age); this bounds them all together. Without it, one client address with its
//! `server.max_sessions_per_ip` sessions, each within its own bounds, made the server hold
//! gigabytes for minutes.
//!
//! Each client address also has a share of it (`limits.max_replay_bytes_per_ip`, by default
//! an eighth), counted as the session limits count addresses: one address filling the whole
//! budget would make every other client's sessions lose their replay, and parked WebSocket
//! sessions end. A session counts against its address through its [`ReplayAccount`].
//!
//! Every entry kept for replay holds a [`Held`] share of the budget, given back when the
//! entry is dropped, however it goes (evicted, delivered to a reconnect, its session ended),
//! so the count cannot drift. The count is the `mcp_replay_bytes` gauge itself: what it shows
//! is what the budget enforces. An entry that does not fit is not kept, and counted in
//! `mcp_dropped_total{reason="replay_budget"}`; what its session does then (give up its own
//! oldest first, refuse a replay that needs it, end rather than resume with a gap) is its
//! holder's: see [`EventLog::push`](crate::transport::events::EventLog::push) and the
//! hosted WebSocket session's outlet. It lives with the sessions' shared state, below the
//! transports that hold the entries.

use crate::observe::metrics::Metrics;
use crate::perimeter::connections::client_key;
use crate::{give_back_places, take_places};
use dashmap::DashMap;
use std::net::IpAddr;
use std::sync::Arc;

/// See the module docs.
#[derive(Debug)]
pub struct ReplayBudget {
    limit: u64,
    /// Each client address's share (0: none).
    per_client: usize,
    /// Bytes held by each address that holds any (an entry is removed at 0, see
    /// [`take_places`]), so the map is bounded by the sessions.
    by_client: DashMap<IpAddr, usize>,
    metrics: Arc<Metrics>,
}

/// What the sessions of one client address keep for replay, within the budget and the
/// address's share; a session holds its own (cheap to clone).
#[derive(Debug, Clone)]
pub struct ReplayAccount {
    budget: Arc<ReplayBudget>,
    /// The client's address as the session limits count it; `None`: no address known (a
    /// session of the library's in-memory transport), the budget alone.
    client: Option<IpAddr>,
}

impl ReplayBudget {
    /// A budget of `limit` bytes, `per_client` of them (0: no share) for each client address,
    /// counted in `metrics.replay_bytes`.
    pub fn new(limit: usize, per_client: usize, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Self {
            limit: limit as u64,
            per_client,
            by_client: DashMap::new(),
            metrics,
        })
    }

    /// The account of the client at `peer` (its address after the trusted proxies).
    pub fn account(self: &Arc<Self>, peer: Option<IpAddr>) -> ReplayAccount {
        ReplayAccount {
            budget: self.clone(),
            client: peer.filter(|_| self.per_client > 0).map(client_key),
        }
    }

    /// Bytes held now, by all sessions (the tests watch it come back to 0).
    #[cfg(any(test, feature = "testing"))]
    pub fn in_use(&self) -> u64 {
        self.metrics.replay_bytes.get()
    }
}

impl ReplayAccount {
    /// A share of `bytes` for an entry kept for replay, unless the budget or the client's
    /// share has not that much left (then nothing is taken).
    pub fn hold(&self, bytes: usize) -> Option<Held> {
        let budget = &self.budget;
        if let Some(client) = self.client {
            if !take_places(&budget.by_client, client, bytes, budget.per_client) {
                return None;
            }
        }
        let within_budget = budget
            .metrics
            .replay_bytes
            .try_add_within(bytes as u64, budget.limit);
        if !within_budget {
            // The client's share taken above goes back: nothing is held.
            if let Some(client) = &self.client {
                give_back_places(&budget.by_client, client, bytes);
            }
            return None;
        }
        Some(Held {
            budget: budget.clone(),
            client: self.client,
            bytes,
        })
    }

    /// Counts `entries` given up, or not kept, for want of budget.
    pub fn dropped(&self, entries: u64) {
        self.budget.metrics.dropped.replay_budget.add(entries);
    }
}

/// One kept entry's share of the [`ReplayBudget`] (and of its client's); given back when
/// dropped.
#[derive(Debug)]
pub struct Held {
    budget: Arc<ReplayBudget>,
    client: Option<IpAddr>,
    bytes: usize,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.metrics.replay_bytes.sub(self.bytes as u64);
        if let Some(client) = &self.client {
            give_back_places(&self.budget.by_client, client, self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_refused_past_the_limit_and_given_back_when_dropped() {
        let metrics = Arc::new(Metrics::default());
        let budget = ReplayBudget::new(100, 0, metrics.clone());
        let account = budget.account(None);
        let a = account.hold(60).expect("fits");
        assert!(account.hold(41).is_none());
        assert_eq!(budget.in_use(), 60, "a refused share takes nothing");
        let b = account.hold(40).expect("fits exactly");
        drop(a);
        assert_eq!(budget.in_use(), 40);
        drop(b);
        assert_eq!(budget.in_use(), 0);
        assert_eq!(metrics.replay_bytes.peak(), 100);
    }

    #[test]
    fn an_address_holds_no_more_than_its_share_and_others_keep_theirs() {
        let budget = ReplayBudget::new(100, 30, Arc::default());
        let ip = |text: &str| Some(text.parse::<IpAddr>().expect("ip"));
        let (greedy, other) = (
            budget.account(ip("10.0.0.1")),
            budget.account(ip("10.0.0.2")),
        );
        let first = greedy.hold(20).expect("within its share");
        assert!(greedy.hold(11).is_none(), "past its share");
        assert!(
            budget.account(ip("::ffff:10.0.0.1")).hold(11).is_none(),
            "the same address, mapped"
        );
        assert_eq!(budget.in_use(), 20, "a refused share takes nothing");
        let others = other.hold(30).expect("another address has its own");
        drop(first);
        let again = greedy.hold(30).expect("the share came back");
        drop((others, again));
        assert_eq!(budget.in_use(), 0);
        assert!(
            budget.by_client.is_empty(),
            "no entry outlives what it held"
        );
        // The budget still bounds them all, and a refusal by it leaves no entry behind.
        let small = ReplayBudget::new(10, 30, Arc::default());
        assert!(small.account(ip("10.0.0.3")).hold(11).is_none());
        assert!(small.by_client.is_empty());
    }
}
