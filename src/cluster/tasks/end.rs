//! Who ends a task once its node may have been taken for dead (tasks in Redis): its runner,
//! or a node that showed it failed (-32031 `nodeLost`) because it found the task's node
//! dead. Exactly one of them, decided in Redis, as for the ends of POST streams
//! (`transport::stream_end`), with the same scripts. (Attack run 52, F3: a node stopped past
//! its alive time went on, and the task the others had shown failed was shown working
//! again, then completed; a client that obeyed the error's "retry it" ran the work twice.)
//!
//! On one key per task (`<key_prefix>task-end:{<id>}`, one key, so that it works on a Redis
//! Cluster too), each step one compare-and-set in a Lua script:
//!
//! - A node about to show a task of another node failed because that node is dead (its
//!   alive key gone: no beat for 3 s; and this node's own beats landing steadily for those
//!   3 s, `Cluster::judges_others`: in an outage, or while Redis pauses its writes, every
//!   alive key lapses) claims the task `lost` first, unless the key says
//!   `held`: the node went on and claimed the task since, so the record is shown as it is.
//!   Lost, the node writes the failed record to Redis too, so that no node shows the task
//!   as its record said before (working) once the task's node is alive again and before
//!   its runner wrote anything. `lost` is kept for the task's time to live. Redis out of
//!   reach for the claim, the task is not shown failed: -32008 `taskStore` (retryable).
//! - The task's runner, before it stores anything after its node may have been taken for
//!   dead (`Cluster::may_be_taken_for_dead`: a beat found its last one gone, or none
//!   reached Redis for 2 s), claims the task `held` for `HOLD_LEASE`, unless the key says
//!   `lost`: then it stops the task (its work is dropped, as a cancel drops it) and stores it
//!   failed, -32031, never what the work came to. A beat's finding wakes the runner at
//!   once, so that a task that has nothing to store for a while stops all the same. Redis out
//!   of reach, the runner goes on, as a stream's node does: when no node reaches Redis, none
//!   can claim the task lost.
//! - `held` is a lease: while the stall goes on (no beat landing), the runner claims again
//!   before it stores anything past `HOLD_COVER` since its last claim, as a stream's node
//!   does. Once a beat lands, the node is alive to the others, who claim nothing while it
//!   is. A node not stalled pays a look at its beats before each store, no round trip.
//! - On the task's own node, `tasks/get` of a task whose runner has not claimed it since the
//!   node may have been taken for dead reads the key: a task found `lost` is shown failed
//!   there too, before its runner learns it.
//!
//! - On one Redis server, the runner's record is written only where the task's end is not
//!   claimed `lost`, in one script (`RedisStore::put_task_unless_lost`): a record stored
//!   after a claim of `held`, by a node that stalled again past the lease between the two,
//!   is refused, and the task failed (review 58 #3).
//!
//! Windows left:
//! - A record the runner stored before it knew it stalled (its last beat under 2 s old)
//!   and that reached Redis only after the stall (the node stopped between the two, a
//!   second or more) may land over the failed record another node wrote, on a Redis
//!   Cluster (the claim and the record are in different slots: not one script); so may one
//!   stored after a claim there. The runner's next claim finds `lost` and stores it failed
//!   again.
//! - A node cut off from Redis alone (its claims unanswered, the others reaching Redis) goes
//!   on; its records land once Redis answers it again, each claimed first (the write-back
//!   claims too), so a task found lost meanwhile is stored failed then. Its own `tasks/get`
//!   shows its memory meanwhile.
//! - A node stalled longer than the task's time to live finds `lost` gone, with the task.
//! - Redis that restarted empty: a live node's alive key is gone until its next beat (within
//!   a second), and another node may claim its task lost meanwhile; that node's runner
//!   finds it lost at its next beat's finding and fails the task: a task that was running
//!   fine fails, -32031 (retryable), rather than shown failed, then working.

use crate::cluster::{Cluster, HoldMark, CLAIM_AGAIN_AFTER, HOLD_COVER, HOLD_LEASE};
use std::time::Instant;

/// Where a runner stands in claiming its task's end; see the module docs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TaskHold {
    /// Where the node stood at the last claim (see [`Cluster::may_be_taken_for_dead`]).
    mark: HoldMark,
    /// In a stall, once Redis answered the last claim: until when it covers the task's
    /// stores (the stall going on, it is made again then).
    covered_until: Option<Instant>,
}

impl TaskHold {
    /// No claim made yet: made at the node's first stall, whenever it comes.
    pub(crate) fn new(cluster: &Cluster) -> Self {
        Self {
            mark: cluster.hold_mark().unconfirmed(),
            covered_until: None,
        }
    }

    /// Whether the task is to be claimed before anything more is stored or shown of it as
    /// this node's memory has it. A node not stalled costs a look at its beats.
    #[inline]
    pub(crate) fn due(&self, cluster: &Cluster) -> bool {
        if cluster.may_be_taken_for_dead(self.mark) {
            return true;
        }
        // Covered in a stall until a beat lands, or until the cover's end.
        self.covered_until
            .is_some_and(|until| cluster.stalled() && Instant::now() >= until)
    }

    /// Claims task `id` for this node when due: false when another node showed it failed
    /// (lost), and the task is to stop. Redis out of reach: for a beat's finding, asked again
    /// after [`CLAIM_AGAIN_AFTER`] for up to `SUSPECT_AFTER` (that beat reached Redis a
    /// moment ago, so the other nodes may too), then given up; in a stall, the stall is
    /// taken as covered until a beat lands, as `transport::stream_end` does.
    pub(crate) async fn hold(&mut self, cluster: &Cluster, id: &str) -> bool {
        let mut unanswered_since: Option<Instant> = None;
        while self.due(cluster) {
            // Claims made in a stall cover that stall (for `HOLD_COVER` at a time); made
            // because a beat found the node taken for dead, that finding only.
            let now = cluster.hold_mark();
            let stalled = cluster.stalled_at(now);
            let mark = if stalled { now } else { now.unconfirmed() };
            let covered_until = stalled.then(|| Instant::now() + HOLD_COVER);
            let held = match cluster.store.redis() {
                Some(redis) => {
                    redis
                        .claim_task_held(&cluster.metrics, id, HOLD_LEASE)
                        .await
                }
                None => Some(true),
            };
            match held {
                Some(held) => {
                    self.mark = mark;
                    self.covered_until = covered_until;
                    return held;
                }
                None if !stalled => {
                    let since = *unanswered_since.get_or_insert_with(Instant::now);
                    if since.elapsed() < crate::cluster::SUSPECT_AFTER {
                        tokio::time::sleep(CLAIM_AGAIN_AFTER).await;
                        continue;
                    }
                    self.mark = mark;
                    self.covered_until = None;
                }
                None => {
                    self.mark = mark;
                    self.covered_until = None;
                }
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::testing::{cluster, stall};
    use std::time::Duration;

    #[tokio::test]
    async fn a_node_not_taken_for_dead_claims_nothing() {
        let cluster = cluster();
        let hold = TaskHold::new(&cluster);
        cluster.note_beat(true);
        cluster.note_beat(true);
        assert!(!hold.due(&cluster));
    }

    #[tokio::test]
    async fn a_beats_finding_or_a_stall_makes_it_due_until_claimed() {
        let cluster = cluster();
        let mut hold = TaskHold::new(&cluster);
        cluster.note_beat(true);
        let findings = cluster.findings();
        cluster.note_beat(false);
        assert!(
            findings.has_changed().unwrap_or(false),
            "the runner is woken"
        );
        assert!(hold.due(&cluster));
        // No Redis here: taken as held (nobody can have claimed it lost).
        assert!(hold.hold(&cluster, "t").await);
        assert!(!hold.due(&cluster), "that finding is settled");
        stall(&cluster, Duration::from_secs(10));
        assert!(hold.due(&cluster), "a stall after it is asked about");
        assert!(hold.hold(&cluster, "t").await);
        assert!(!hold.due(&cluster), "covered while the stall goes on");
        cluster.note_beat(false);
        assert!(hold.due(&cluster), "the next finding is asked about");
    }
}
