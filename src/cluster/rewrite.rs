//! The word a node says in Redis while it writes again what Redis lost (it restarted
//! empty): its task records and the records of the sessions it hosts. Another node that
//! finds no record meanwhile answers as Redis could not say (-32008 `taskStore`, HTTP 503,
//! both retryable), not "unknown task" or 404, which are final for a client
//! ([`Cluster::absent_may_be_lost`]).
//!
//! One key for every node (`RedisStore::mark_rewriting`), set by each node for [`LEASE`]
//! and renewed every [`RENEW`] while it rewrites or may ([`keep_saying`]): from its first
//! beat after an outage (Redis may have come back empty; [`Cluster::may_rewrite`]) until its
//! task records are all written (`Tasks::is_rewriting`) and every session host that owed
//! its record ([`RecordOwed`]) has had it taken.

use super::Cluster;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often a node writing its records again renews its word of it, and [`LEASE`], how
/// long each renewal holds: three renewals, so that one unanswered does not let it lapse.
const RENEW: Duration = Duration::from_secs(1);
const LEASE: Duration = Duration::from_secs(3);

/// What this node owes of the word, beside its task records (`Tasks::is_rewriting`).
#[derive(Debug, Default)]
pub(crate) struct Rewrite {
    /// A beat after an outage found this node keeping records, and Redis may have come back
    /// empty: the node says it may be writing them again until that beat reads Redis's
    /// epoch ([`Cluster::may_rewrite`]).
    may_be: AtomicBool,
    /// The session records this node's hosts owe Redis since it lost them: one per
    /// [`RecordOwed`] alive.
    sessions_owed: Arc<AtomicUsize>,
}

/// A session record Redis lost that its host owes it: held until Redis took the record
/// again (a write begun after the loss landed), or the session ended here. While one is
/// held, the node says it is rewriting.
#[derive(Debug)]
pub(crate) struct RecordOwed(Arc<AtomicUsize>);

impl Drop for RecordOwed {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Rewrite {
    /// One more session record owed (see [`RecordOwed`]).
    pub(crate) fn owe_record(&self) -> RecordOwed {
        self.sessions_owed.fetch_add(1, Ordering::AcqRel);
        RecordOwed(self.sessions_owed.clone())
    }

    /// The session records owed now.
    pub(crate) fn records_owed(&self) -> usize {
        self.sessions_owed.load(Ordering::Acquire)
    }
}

/// The sessions whose records this node keeps in Redis, as the hosting transport knows
/// them (it sets [`Cluster::session_records`]): the cluster layer cannot name its actors.
pub(crate) trait SessionRecords: Send + Sync {
    /// Whether this node hosts a session (it may keep a record of it).
    fn any(&self) -> bool;

    /// Redis lost what it held: every host writes its session's record again now, one
    /// that keeps a record holding an `owe()` until Redis took it.
    fn lost(&self, owe: &dyn Fn() -> RecordOwed);
}

impl Cluster {
    /// Whether this node may be writing its records again: called by a beat after an
    /// outage with `true` (Redis may have come back empty; the node says so at once, and
    /// every [`RENEW`] after, when it keeps task records or hosts sessions), and with
    /// `false` once that beat read Redis's epoch (a loss it found is said by
    /// [`records_lost`](Self::records_lost) first). Said before the node knows, with its
    /// first beat rather than two round trips later (the beat's answer, then the epoch's),
    /// so that another node quicker to see the loss does not take its records for gone
    /// meanwhile (CI run of stop 53: over a slow link the word landed after the other
    /// node's wait). A loss that was not costs "retryable" for "unknown" a few seconds.
    pub(crate) fn may_rewrite(self: &Arc<Self>, may: bool) {
        if !may {
            self.rewrite.may_be.store(false, Ordering::Release);
        } else if self.tasks.keeps_records() || self.session_records.get().is_some_and(|s| s.any())
        {
            // Said at once when it begins; [`keep_saying`] renews it (a beat each second of
            // an outage said it again beside the loop's, two failed writes a second).
            if !self.rewrite.may_be.swap(true, Ordering::AcqRel) {
                say(self);
            }
        }
    }

    /// Redis lost what it held (a beat found its epoch changed): the task records this node
    /// keeps are due to be written again (`tasks::keep_tidy` writes them), and every session
    /// host writes its record now; the node says so at once, until they are all back.
    pub(crate) fn records_lost(self: &Arc<Self>) {
        self.tasks.unsave_all();
        if let Some(sessions) = self.session_records.get() {
            sessions.lost(&|| self.rewrite.owe_record());
        }
        if self.is_rewriting() {
            say(self);
        }
    }

    /// Whether this node writes again what Redis lost: task records not all back, session
    /// records owed, or it may be (see [`may_rewrite`](Self::may_rewrite)).
    fn is_rewriting(&self) -> bool {
        self.rewrite.may_be.load(Ordering::Acquire)
            || self.rewrite.records_owed() > 0
            || self.tasks.is_rewriting()
    }

    /// Whether a record Redis was just found not to hold may be one it lost rather than one
    /// that does not exist: within this node's own wait after Redis's epoch changed
    /// ([`record_may_be_lost`](Self::record_may_be_lost)), or while some node says it
    /// writes its records again (past that wait: thousands of records, or a slow link;
    /// attack run 52b, F2, and stop 54's note). Asked only where no record was found. True
    /// when Redis cannot say.
    pub(crate) async fn absent_may_be_lost(&self, redis: &super::store::RedisStore) -> bool {
        match redis.epoch(&self.metrics).await {
            Some(epoch) if !self.record_may_be_lost(epoch.as_deref()) => {
                redis.rewriting(&self.metrics).await != Some(false)
            }
            _ => true,
        }
    }
}

/// Says in Redis every [`RENEW`] that this node writes its records again, while it does or
/// may ([`Cluster::is_rewriting`]). A loop of its own: the task records' write-back passes
/// (`tasks::keep_tidy`) wait on Redis, and the word lapsed between them (the other nodes
/// took the records still to come for unknown); each word is sent off this loop, so one
/// Redis answers late (a slow link) does not put off the next. Started with the bridge.
pub(crate) async fn keep_saying(cluster: std::sync::Weak<Cluster>) {
    let mut every = tokio::time::interval(RENEW);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(cluster) = cluster.upgrade() else {
            return;
        };
        if cluster.is_rewriting() {
            say(&cluster);
        }
    }
}

/// Says in Redis, for [`LEASE`], that this node writes its records again. Sent off the
/// caller's task.
fn say(cluster: &Arc<Cluster>) {
    let cluster = cluster.clone();
    actix_rt::spawn(async move {
        if let Some(redis) = cluster.store.redis() {
            redis
                .mark_rewriting(&cluster.metrics, cluster.node_number(), LEASE)
                .await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_owed_while_its_token_lives() {
        let rewrite = Rewrite::default();
        let first = rewrite.owe_record();
        let second = rewrite.owe_record();
        assert_eq!(rewrite.records_owed(), 2);
        drop(first);
        assert_eq!(rewrite.records_owed(), 1);
        drop(second);
        assert_eq!(rewrite.records_owed(), 0);
    }
}
