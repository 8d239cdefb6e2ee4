//! What the nodes of a deployment share, through Redis when `redis.url` is set and in this
//! node's memory otherwise: the [`store`] (de-duplication entries, nonces, the change-bus
//! bridge), [`dedup`] (idempotency keys and retried request ids), [`tasks`] (the
//! 2026-07-28 tasks extension) and [`rewrite`] (what a node writes again when Redis lost
//! what it held).

pub mod dedup;
pub(crate) mod rewrite;
pub mod store;
pub mod tasks;

use crate::config::Settings;
use crate::observe::metrics::Metrics;
use crate::registry::bus::ChangeBus;
use std::sync::Arc;

/// This node's part of the shared state, and what the cluster layer reads: the store, the
/// tasks, the settings and the metrics it counts in.
pub struct Cluster {
    /// The server's settings.
    pub settings: Arc<Settings>,
    /// The server's metrics.
    pub metrics: Arc<Metrics>,
    /// What the nodes share (de-duplication entries, nonces; Redis when configured).
    pub(crate) store: store::Store,
    /// The tasks of this node (2026-07-28 tasks extension).
    pub(crate) tasks: tasks::Tasks,
    /// The registry's change bus: task statuses go out on it, and the bridge carries it to
    /// and from the other nodes.
    pub bus: ChangeBus,
    /// Where the other nodes' notes about sessions go (the hosting transport sets it).
    pub(crate) session_sink: std::sync::OnceLock<store::bridge::SessionSink>,
    /// The sessions whose records this node keeps in Redis: written again at once when
    /// Redis lost what it held (it restarted empty), and said to be meanwhile (the hosting
    /// transport sets it; see [`rewrite`]).
    pub(crate) session_records: std::sync::OnceLock<Box<dyn rewrite::SessionRecords>>,
    /// What this node owes Redis after it lost what it held, and says it writes again
    /// (see [`rewrite`]).
    pub(crate) rewrite: rewrite::Rewrite,
    /// Tells the hosting transport that this node's bus subscription was down a while: the
    /// notes other nodes published meanwhile (a session deleted, changed) did not reach its
    /// copies, which read their records again (the hosting transport sets it).
    pub(crate) notes_missed: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// The node's signature nonces (some identity must sign, and Redis is configured): all
    /// written to Redis again when it lost what it held, so that the other nodes refuse
    /// replays of the requests this node ran (attack run 51, N1).
    pub(crate) nonces: std::sync::OnceLock<Arc<store::NonceCache>>,
    /// Redis's epoch as this node's beat last read it, and when it last changed, if it did
    /// (see [`record_may_be_lost`](Self::record_may_be_lost)).
    pub(crate) epoch: std::sync::Mutex<Option<(String, Option<std::time::Instant>)>>,
    /// The secret of multi round-trip request states the nodes share through Redis, when
    /// this node took it from there: put back if Redis loses it, so that a node started
    /// after finds it rather than make its own.
    pub(crate) shared_secret: std::sync::OnceLock<store::SharedSecret>,
    /// Sessions ended here (DELETE) whose end the other nodes could not be told (Redis
    /// took the deletion of the record, not the note), oldest first: told at the next beat
    /// Redis takes. Bounded ([`MAX_OWED_ENDS`]).
    pub(crate) owed_ends: std::sync::Mutex<std::collections::VecDeque<String>>,
    /// Whether a task tells the owed ends now: one at a time (review 53 #7).
    pub(crate) telling_owed_ends: std::sync::atomic::AtomicBool,
    /// When this node's beat last reached Redis, in ms since [`Cluster::clock`]'s start
    /// (see [`may_be_taken_for_dead`](Self::may_be_taken_for_dead)).
    last_beat_ms: std::sync::atomic::AtomicU64,
    /// Counts the beats that found this node's last one gone from Redis (past its alive
    /// time, the other nodes took it for dead).
    taken_for_dead: std::sync::atomic::AtomicU64,
    /// Tells the runners of this node's tasks that a beat found the node taken for dead
    /// (the count of such findings), so that they claim their tasks at once rather than at
    /// their next change (see [`tasks::end`]).
    findings: tokio::sync::watch::Sender<u64>,
    /// When (`clock` ms) this node's beats began to reach Redis steadily, each within
    /// [`SUSPECT_AFTER`] of the one before: see [`judges_others`](Self::judges_others).
    steady_since_ms: std::sync::atomic::AtomicU64,
    /// What `last_beat_ms` counts from.
    clock: std::time::Instant,
    /// Writes to Redis under way that the server waits for before it stops
    /// ([`LastWrite`]): WebSocket session records' last writes and deletes (see
    /// `transport::socket_record`), and the releases of keyed calls' claims.
    pub(crate) last_writes: std::sync::atomic::AtomicUsize,
    /// The last of this node's SSE stream numbers given (see [`next_stream`](Self::next_stream)).
    streams: std::sync::atomic::AtomicU64,
    /// A change of this node's did not reach the other nodes (Redis paused or away, or the
    /// bridge's queue full): once Redis answers again, they are told everything changed
    /// (`store::bridge`).
    pub(crate) owes_everything: std::sync::atomic::AtomicBool,
}

/// Where a node stood when a holder of a session confirmed it still holds it (see
/// [`Cluster::may_be_taken_for_dead`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct HoldMark {
    taken_for_dead: u64,
    beat_ms: u64,
}

impl HoldMark {
    /// This mark, as of no confirmation made since a stall: a holder asks once the node
    /// goes [`SUSPECT_AFTER`] without a beat, whenever its last beat was.
    pub(crate) fn unconfirmed(self) -> Self {
        Self { beat_ms: 0, ..self }
    }

    /// Whether this is a mark of no confirmation made in a stall ([`unconfirmed`](Self::unconfirmed)).
    pub(crate) fn is_unconfirmed(self) -> bool {
        self.beat_ms == 0
    }
}

/// The most session ends a node owes the others (see `Cluster::owed_ends`); past it the
/// oldest is given up (its copies elsewhere end when they are let go, idle).
pub(crate) const MAX_OWED_ENDS: usize = 1024;

/// How long without a beat reaching Redis makes a node ask whether it still holds its
/// sessions before it answers on them: a node is dead to the others 3 s after its last beat
/// (one a second), and a gap over 2 s is not a beat late, but the node stalled or cut off.
pub(crate) const SUSPECT_AFTER: std::time::Duration = std::time::Duration::from_millis(2000);

/// How long a node's alive key lives after each of its beats: three beats. A node whose key
/// is gone is taken for dead by the others (see [`Cluster::judges_others`]).
pub(crate) const ALIVE_FOR: std::time::Duration =
    std::time::Duration::from_secs(store::bridge::BEAT.as_secs() * 3);

/// How long a node's claim of an end it runs (`held`: a POST stream's, see
/// `transport::stream_end`; a task's, see [`tasks::end`]) holds the other nodes off: its
/// alive time (three beats), as long as a node that died is taken for alive.
pub(crate) const HOLD_LEASE: std::time::Duration = ALIVE_FOR;

/// How long a node's claims cover what it does in a stall that goes on (no beat landing): a
/// third of [`HOLD_LEASE`], so that the next claims land long before the lease of the last
/// ends, whatever the round trip.
pub(crate) const HOLD_COVER: std::time::Duration = store::bridge::BEAT;

/// How long after claims made for a beat's finding went unanswered they are made again.
pub(crate) const CLAIM_AGAIN_AFTER: std::time::Duration = std::time::Duration::from_millis(200);

/// How long after Redis lost what it held (as a node's beat found) a record it does not
/// hold may still be one a node is writing again: three beats.
pub(crate) const REWRITE_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

impl Cluster {
    /// This node's number among the nodes sharing a Redis (20 bits of its random id):
    /// what it tells others it is alive under, and the high bits of the ids it gives (its
    /// streams' numbers, its requests to clients), so those of two nodes never meet.
    pub fn node_number(&self) -> u64 {
        self.store.node() & 0xF_FFFF
    }

    /// The number of the node that made claim `owner` (see `Store::new_owner`).
    pub(crate) fn number_of(owner: store::ClaimId) -> u64 {
        ((owner >> 64) as u64) & 0xF_FFFF
    }

    /// The first of this node's ids: [`node_number`](Self::node_number) above 32 bits (below
    /// 2^53, exact in every JSON reader).
    pub fn node_base(&self) -> u64 {
        self.node_number() << 32
    }

    /// The cluster state the settings ask for (connecting to Redis happens lazily).
    pub fn new(settings: Arc<Settings>, metrics: Arc<Metrics>, bus: ChangeBus) -> Arc<Self> {
        Arc::new(Self {
            store: store::Store::new(&settings),
            tasks: tasks::Tasks::new(&settings.tasks, metrics.clone()),
            settings,
            metrics,
            bus,
            session_sink: std::sync::OnceLock::new(),
            session_records: std::sync::OnceLock::new(),
            rewrite: rewrite::Rewrite::default(),
            notes_missed: std::sync::OnceLock::new(),
            nonces: std::sync::OnceLock::new(),
            epoch: std::sync::Mutex::new(None),
            shared_secret: std::sync::OnceLock::new(),
            owed_ends: std::sync::Mutex::default(),
            telling_owed_ends: std::sync::atomic::AtomicBool::new(false),
            last_beat_ms: std::sync::atomic::AtomicU64::new(0),
            taken_for_dead: std::sync::atomic::AtomicU64::new(0),
            findings: tokio::sync::watch::Sender::new(0),
            steady_since_ms: std::sync::atomic::AtomicU64::new(0),
            clock: std::time::Instant::now(),
            last_writes: std::sync::atomic::AtomicUsize::new(0),
            streams: std::sync::atomic::AtomicU64::new(0),
            owes_everything: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// A beat reached Redis; `still_held`: Redis still held the node's last one.
    pub(crate) fn note_beat(&self, still_held: bool) {
        use std::sync::atomic::Ordering;
        let now = (self.clock.elapsed().as_millis() as u64).max(1);
        // Not the first beat: a node is new to the others before it is dead to them. Counted
        // before the beat's time is stored: a holder that sees the new time sees the count
        // (review 52 #9).
        let before = self.last_beat_ms.load(Ordering::SeqCst);
        let found = !still_held && before != 0;
        if found {
            self.taken_for_dead.fetch_add(1, Ordering::SeqCst);
        }
        if before == 0 || now.saturating_sub(before) > SUSPECT_AFTER.as_millis() as u64 {
            self.steady_since_ms.store(now, Ordering::SeqCst);
        }
        self.last_beat_ms.store(now, Ordering::SeqCst);
        if found {
            // After the beat's time is stored: a runner woken reads a mark of this beat.
            self.findings.send_modify(|count| *count += 1);
        }
    }

    /// Where this node stands for [`may_be_taken_for_dead`](Self::may_be_taken_for_dead):
    /// how many times a beat found it taken for dead, and when its last beat reached Redis.
    pub(crate) fn hold_mark(&self) -> HoldMark {
        use std::sync::atomic::Ordering;
        let beat_ms = self.last_beat_ms.load(Ordering::SeqCst);
        HoldMark {
            taken_for_dead: self.taken_for_dead.load(Ordering::SeqCst),
            beat_ms,
        }
    }

    /// Whether the other nodes may have taken this node for dead since a holder of a session
    /// last confirmed it still holds it (`confirmed`: the [`hold_mark`](Self::hold_mark)
    /// then): a beat found the node's last one gone since, or no beat reached Redis for
    /// [`SUSPECT_AFTER`] and none has since that confirmation (the node stalled: stopped, or
    /// a VM frozen; this is known before the next beat is; once confirmed in an outage, the
    /// holder is not asked again until a beat lands, review 52 #1). Its sessions may have
    /// been taken up elsewhere, and answered there: their holders ask Redis before they
    /// answer again.
    pub(crate) fn may_be_taken_for_dead(&self, confirmed: HoldMark) -> bool {
        let now = self.hold_mark();
        now.taken_for_dead != confirmed.taken_for_dead
            || (now.beat_ms != confirmed.beat_ms && self.stalled_at(now))
    }

    /// Changes each time a beat finds this node taken for dead (see
    /// [`may_be_taken_for_dead`](Self::may_be_taken_for_dead)).
    pub(crate) fn findings(&self) -> tokio::sync::watch::Receiver<u64> {
        self.findings.subscribe()
    }

    /// Whether this node may take another for dead because its alive key is gone from
    /// Redis (and claim what it ran `lost`): only once its own beats have reached Redis
    /// steadily for a node's alive time ([`ALIVE_FOR`]), the last within [`SUSPECT_AFTER`].
    /// Beats of its own that did not land (Redis away, or its writes paused while reads went
    /// on, as in a failover) say the other nodes' did not either: their keys lapsed for that,
    /// not because they died, and they are back within a beat of Redis (attack run 58, F4: a
    /// claim made as the pause ended, or held up by it, failed tasks of live nodes).
    pub(crate) fn judges_others(&self) -> bool {
        use std::sync::atomic::Ordering;
        let now = self.clock.elapsed().as_millis() as u64;
        let mark = self.hold_mark();
        let steady_since = self.steady_since_ms.load(Ordering::SeqCst);
        !self.stalled_at(mark)
            && mark.beat_ms != 0
            && now.saturating_sub(steady_since) >= ALIVE_FOR.as_millis() as u64
    }

    /// Whether `node` is dead to this node: Redis no longer holds its alive key, and this
    /// node may judge ([`judges_others`](Self::judges_others)) before the read and after it
    /// (the read may have waited behind writes Redis held back, and answer as they end). Not
    /// known (Redis did not answer, or no Redis) counts as alive. What every judgment of
    /// another node's death goes through: a task shown failed, a POST stream followed, a
    /// keyed call's claim freed, a WebSocket session taken up without a hand-over.
    pub(crate) async fn found_dead(&self, node: u64) -> bool {
        let Some(redis) = self.store.redis() else {
            return false;
        };
        self.judges_others()
            && redis.is_alive(&self.metrics, node).await == Some(false)
            && self.judges_others()
    }

    /// Whether no beat reached Redis for [`SUSPECT_AFTER`] (none yet: no).
    pub(crate) fn stalled(&self) -> bool {
        self.stalled_at(self.hold_mark())
    }

    /// Whether `now` (the node's [`hold_mark`](Self::hold_mark) just read) is of a stall: no
    /// beat reached Redis for [`SUSPECT_AFTER`] before it (none yet: no). Of the mark read
    /// once, not of a second read: a beat landing between two would give a mark of the
    /// beat after the stall (review 54 #6).
    pub(crate) fn stalled_at(&self, now: HoldMark) -> bool {
        let since_beat = (self.clock.elapsed().as_millis() as u64).saturating_sub(now.beat_ms);
        now.beat_ms != 0 && since_beat > SUSPECT_AFTER.as_millis() as u64
    }

    /// Notes Redis's epoch as a beat read it; whether it changed (Redis lost what it held).
    pub(crate) fn note_epoch(&self, epoch: String) -> bool {
        let mut known = crate::lock(&self.epoch);
        match known.as_mut() {
            Some((before, _)) if *before == epoch => false,
            Some((before, changed_at)) => {
                *before = epoch;
                *changed_at = Some(std::time::Instant::now());
                true
            }
            // The first one this node reads is no change.
            None => {
                *known = Some((epoch, None));
                false
            }
        }
    }

    /// How long this node's beat found Redis's epoch changed less than [`REWRITE_WAIT`] ago:
    /// what is left of that wait, while the nodes write again what Redis lost (restarted
    /// empty). `None` outside it.
    pub(crate) fn rewrite_left(&self) -> Option<std::time::Duration> {
        let known = crate::lock(&self.epoch);
        let changed_at = known.as_ref()?.1?;
        REWRITE_WAIT.checked_sub(changed_at.elapsed())
    }

    /// Whether a record Redis does not hold (`current`: Redis's epoch now, as just read) may
    /// be one it lost rather than one that does not exist: Redis's epoch is not the one this
    /// node's beat knows, or changed within [`REWRITE_WAIT`] (the time the nodes take to
    /// write their records again). The request is then refused as one Redis cannot answer
    /// (retryable), not as one of an ended session or an unknown task (final).
    pub(crate) fn record_may_be_lost(&self, current: Option<&str>) -> bool {
        match (&*crate::lock(&self.epoch), current) {
            (Some((known, changed_at)), Some(current)) => {
                known != current || changed_at.is_some_and(|at| at.elapsed() < REWRITE_WAIT)
            }
            _ => true,
        }
    }

    /// The epoch under which a keyed call's key is claimed ([`Store::claim`](store::Store::claim)):
    /// Redis's epoch as this node's beat last read it, with `cluster.on_store_error =
    /// "refuse"`. A key Redis finds free under another epoch may be one whose claim it lost
    /// a moment ago (restarted empty, flushed), before this node's beat noticed and its
    /// wait after the change began ([`rewrite_left`](Self::rewrite_left)). `None` (claimed
    /// whatever the epoch) before the node's first beat read one (it has nothing to compare;
    /// that beat comes at once), or when the node runs calls alone while Redis is away.
    pub(crate) fn epoch_for_claims(&self) -> Option<String> {
        if !self.store.refuses_without_redis() {
            return None;
        }
        crate::lock(&self.epoch)
            .as_ref()
            .map(|(known, _)| known.clone())
    }

    /// A number for an SSE stream of an HTTP session on this node (sessions in Redis): this
    /// node's [`node_base`](Self::node_base) plus a count of this node's, with bit 31 set
    /// for a session's `GET` stream (`transport::mirror::is_get_stream`). No two streams of
    /// the node share one (until the count wraps, after 2^31 streams), so a `Last-Event-ID`
    /// names one stream of one copy of its session: a copy that took a session up again
    /// does not number its streams as the copy before it did, whose events the session's
    /// mirror still holds.
    pub(crate) fn next_stream(&self, get: bool) -> u64 {
        let count = self
            .streams
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .wrapping_add(1);
        // Never 0 below bit 31: that number is a `GET` stream's of earlier versions.
        let count = (count % ((1 << 31) - 1)) + 1;
        self.node_base() | if get { 1 << 31 } else { 0 } | count
    }
}

/// A cluster to test what depends on the node's beats, without Redis.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    /// A cluster without Redis whose clock started a minute ago, so that a stall can be set
    /// by hand (the last beat's time) without waiting for one.
    pub(crate) fn cluster() -> Arc<Cluster> {
        let mut cluster = Cluster::new(
            Arc::new(crate::config::Settings::default()),
            Arc::default(),
            crate::registry::bus::ChangeBus::default(),
        );
        let started = Instant::now()
            .checked_sub(Duration::from_secs(60))
            .expect("a minute ago");
        Arc::get_mut(&mut cluster).expect("not shared yet").clock = started;
        cluster
    }

    /// The node's last beat landed `ago` ago, more than [`SUSPECT_AFTER`]: it stalls.
    pub(crate) fn stall(cluster: &Cluster, ago: Duration) {
        assert!(ago > SUSPECT_AFTER);
        let now = cluster.clock.elapsed();
        let last_beat = (now - ago).as_millis() as u64;
        cluster.last_beat_ms.store(last_beat, Ordering::SeqCst);
    }
}

/// A write to Redis under way that the server waits for before it stops, counted in
/// `Cluster::last_writes` until dropped: stopped midway, it would leave Redis with what the
/// write was to replace (a session's old record, a claim with no run behind it).
pub(crate) struct LastWrite(Arc<Cluster>);

impl LastWrite {
    /// Counts a write under way until the guard is dropped.
    pub(crate) fn begin(cluster: &Arc<Cluster>) -> Self {
        cluster
            .last_writes
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Self(cluster.clone())
    }
}

impl Drop for LastWrite {
    fn drop(&mut self) {
        self.0
            .last_writes
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{cluster, stall};

    #[test]
    fn a_node_with_no_beat_yet_or_beating_is_not_taken_for_dead() {
        let cluster = cluster();
        let unconfirmed = cluster.hold_mark().unconfirmed();
        assert!(!cluster.stalled(), "no beat yet is no stall");
        assert!(!cluster.may_be_taken_for_dead(unconfirmed));
        cluster.note_beat(true);
        cluster.note_beat(true);
        assert!(!cluster.stalled());
        assert!(!cluster.may_be_taken_for_dead(unconfirmed));
        assert!(!cluster.may_be_taken_for_dead(cluster.hold_mark()));
    }

    #[test]
    fn a_stall_is_asked_about_once_until_a_beat_lands() {
        let cluster = cluster();
        cluster.note_beat(true);
        let before_the_stall = cluster.hold_mark().unconfirmed();
        stall(&cluster, std::time::Duration::from_secs(10));
        assert!(cluster.stalled());
        assert!(
            cluster.may_be_taken_for_dead(before_the_stall),
            "a holder not asked in this stall asks"
        );
        let asked_in_the_stall = cluster.hold_mark();
        assert!(
            !cluster.may_be_taken_for_dead(asked_in_the_stall),
            "one asked in this stall is not asked again while it lasts"
        );
        // A beat lands: the stall is over, and nobody asks.
        cluster.note_beat(true);
        assert!(!cluster.stalled());
        assert!(!cluster.may_be_taken_for_dead(asked_in_the_stall));
        // Another stall, after a later beat: the answer to the first does not cover it.
        stall(&cluster, std::time::Duration::from_secs(5));
        assert!(cluster.may_be_taken_for_dead(asked_in_the_stall));
    }

    #[test]
    fn a_beat_that_finds_the_node_taken_for_dead_makes_every_holder_ask() {
        let cluster = cluster();
        // The first beat finds no earlier one: a node is new before it is dead.
        let at_start = cluster.hold_mark().unconfirmed();
        cluster.note_beat(false);
        assert!(!cluster.may_be_taken_for_dead(at_start));
        let first = cluster.hold_mark();
        cluster.note_beat(false);
        assert!(!cluster.stalled(), "the beat landed: no stall");
        assert!(cluster.may_be_taken_for_dead(first));
        assert!(cluster.may_be_taken_for_dead(first.unconfirmed()));
        // A holder that asked since is covered, until a later beat finds it so again.
        let asked = cluster.hold_mark().unconfirmed();
        assert!(!cluster.may_be_taken_for_dead(asked));
        cluster.note_beat(true);
        assert!(!cluster.may_be_taken_for_dead(asked));
        cluster.note_beat(false);
        assert!(cluster.may_be_taken_for_dead(asked));
    }
}
