//! The server's budget of what sessions hold for replay (`limits.max_replay_bytes`): the
//! events of every HTTP session's SSE log ([`EventLog`](crate::transport::events::EventLog),
//! for `Last-Event-ID`) and the messages every parked WebSocket session keeps for its
//! reconnect ([`hosted`](crate::transport::hosted)). Each session bounds its own, by count and by bytes (and its log by
//! age); this bounds them all together. Without it, one client address with its
//! `server.max_sessions_per_ip` sessions, each within its own bounds, made the server hold
//! gigabytes for minutes.
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
use std::sync::Arc;

/// See the module docs.
#[derive(Debug)]
pub struct ReplayBudget {
    limit: u64,
    metrics: Arc<Metrics>,
}

impl ReplayBudget {
    /// A budget of `limit` bytes, counted in `metrics.replay_bytes`.
    pub fn new(limit: usize, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Self {
            limit: limit as u64,
            metrics,
        })
    }

    /// A share of `bytes` for an entry kept for replay, unless the budget has not that much
    /// left (then nothing is taken).
    pub fn hold(self: &Arc<Self>, bytes: usize) -> Option<Held> {
        let bytes = bytes as u64;
        self.metrics
            .replay_bytes
            .try_add_within(bytes, self.limit)
            .then(|| Held {
                budget: self.clone(),
                bytes,
            })
    }

    /// Counts `entries` given up, or not kept, for want of budget.
    pub fn dropped(&self, entries: u64) {
        self.metrics.dropped.replay_budget.add(entries);
    }

    /// Bytes held now, by all sessions (the tests watch it come back to 0).
    #[cfg(any(test, feature = "testing"))]
    pub fn in_use(&self) -> u64 {
        self.metrics.replay_bytes.get()
    }
}

/// One kept entry's share of the [`ReplayBudget`]; given back when dropped.
#[derive(Debug)]
pub struct Held {
    budget: Arc<ReplayBudget>,
    bytes: u64,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.metrics.replay_bytes.sub(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_refused_past_the_limit_and_given_back_when_dropped() {
        let metrics = Arc::new(Metrics::default());
        let budget = ReplayBudget::new(100, metrics.clone());
        let a = budget.hold(60).expect("fits");
        assert!(budget.hold(41).is_none());
        assert_eq!(budget.in_use(), 60, "a refused share takes nothing");
        let b = budget.hold(40).expect("fits exactly");
        drop(a);
        assert_eq!(budget.in_use(), 40);
        drop(b);
        assert_eq!(budget.in_use(), 0);
        assert_eq!(metrics.replay_bytes.peak(), 100);
    }
}
