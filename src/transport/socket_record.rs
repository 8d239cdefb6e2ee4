//! The record a WebSocket session keeps in Redis (sessions in Redis, resumption on), so
//! that another node can take the session up after its node died: what `initialize`
//! settled and what the client changed since (a
//! [`SessionRecord`](crate::session::record::SessionRecord)), and the requests it has had in
//! flight for [`RECORD_AFTER`], which that node answers -32031 (the node was lost).
//!
//! A [`SocketRecord`] moves with the session's core: from the socket's actor to the
//! [`HostedSession`](super::hosted::HostedSession) that keeps the session parked or relays a
//! resumed socket's frames to it, and it is begun afresh by a node that takes a session up.
//! Either actor calls [`keep`] after anything that may change the session (a frame, a drain
//! of its inbox); the record is written when it changed, at most once per [`RECORD_AFTER`],
//! one write at a time.

use crate::cluster::rewrite::RecordOwed;
use crate::cluster::LastWrite;
use crate::protocol::jsonrpc::RequestId;
use crate::session::shared::{SessionId, Shared};
use crate::session::Session;
use actix::dev::ToEnvelope;
use actix::prelude::*;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A request is listed in the record once it has run this long, and the record is written
/// at most this often: should the node die, a request begun or answered within this much
/// before is the one that may get no answer, or a second one (-32031), from the node that
/// takes the session up, unless its client lists what it awaits on resume
/// ([`super::awaited`]). Requests answered sooner never cost a write, and a session busy
/// with longer ones writes one record for all its changes in that time (benches/README.md,
/// "A WebSocket session's record").
pub(crate) const RECORD_AFTER: Duration = Duration::from_millis(20);

/// A WebSocket session's record in Redis, as its host keeps it; see the module docs.
pub(crate) struct SocketRecord {
    shared: Arc<Shared>,
    id: String,
    /// How long Redis keeps the record: as long as a parked session waits, and more.
    ttl: Duration,
    /// What the record last written holds.
    stored: Option<Stored>,
    /// The write under way. One at a time, so that they land in order; what changes
    /// meanwhile is written when it is done ([`RecordWritten`]).
    writing: Option<tokio::task::JoinHandle<WriteOutcome>>,
    /// A look is scheduled: a request comes of age, or the spacing of writes ends.
    look_armed: bool,
    /// Where the node stood when it last confirmed it still holds the session (see
    /// [`confirm_held`]).
    confirmed: crate::cluster::HoldMark,
    /// A confirmation is under way: the session's answers wait for it.
    confirming: bool,
    /// Since when the questions asked for a beat's finding went unanswered (see
    /// [`hold_confirmed`]).
    unanswered_since: Option<Instant>,
    /// Redis lost the record (it restarted empty): owed until a write begun after lands,
    /// the node saying meanwhile that it writes its records again (`cluster::rewrite`).
    owed: Option<RecordOwed>,
    /// The write under way began while the record was owed: its landing pays it.
    owed_write_under_way: bool,
}

/// What the record was last written with.
struct Stored {
    /// [`Session::revision`] then.
    revision: u64,
    /// The requests in flight it lists ([`Session::in_flight_settled`]).
    in_flight: Vec<RequestId>,
    /// When: the next write waits [`RECORD_AFTER`]; a quarter of the time to live later,
    /// the record is written again, changed or not.
    at: Instant,
}

/// Whether the session's host may answer on it now: true unless the node may have been
/// taken for dead since it last confirmed it holds the session
/// ([`Cluster::may_be_taken_for_dead`](crate::cluster::Cluster::may_be_taken_for_dead)). Then it asks Redis, and the answers wait: another
/// node may have taken the session up meanwhile and answered its requests there (-32031),
/// and an answer here too would be a second one (attack run 50c, F5). The answer comes as
/// [`HoldConfirmed`]. A Redis that cannot be asked is taken as no other node's either (none
/// can take a session up without it): the answers go on.
pub(crate) fn confirm_held<A>(record: &mut SocketRecord, ctx: &mut A::Context) -> bool
where
    A: Actor + Handler<HoldConfirmed>,
    A::Context: AsyncContext<A> + ToEnvelope<A, HoldConfirmed>,
{
    if record.confirming {
        return false;
    }
    let cluster = &record.shared.cluster;
    if !cluster.may_be_taken_for_dead(record.confirmed) {
        return true;
    }
    record.confirming = true;
    // A question asked in a stall covers that stall (not asked again until a beat lands);
    // one asked because a beat found the node taken for dead covers that finding only: a
    // stall after it is asked about again (review 53 #2).
    let now = cluster.hold_mark();
    let mark = if cluster.stalled_at(now) {
        now
    } else {
        now.unconfirmed()
    };
    let cluster = cluster.clone();
    let id = record.id.clone();
    let host = ctx.address();
    actix::spawn(async move {
        let held = match cluster.store.redis() {
            Some(redis) => {
                redis
                    .holds_session(&cluster.metrics, &id, cluster.node_number())
                    .await
            }
            None => None,
        };
        host.do_send(HoldConfirmed { held, mark });
    });
    false
}

/// How long after a question [`confirm_held`] asked went unanswered, outside a stall, it is
/// asked again.
const ASK_AGAIN_AFTER: Duration = Duration::from_millis(200);

/// Redis said whether this node still holds a session ([`confirm_held`]).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct HoldConfirmed {
    /// `Some(false)`: another node took the session up. `None`: Redis could not be asked.
    pub(crate) held: Option<bool>,
    /// Where the node stood when it was asked.
    mark: crate::cluster::HoldMark,
}

/// Redis lost the record `host` keeps (see [`RecordsLost`]): written again now, changed or
/// not, `owed` held until it lands. `owed` back when `host` keeps no WebSocket session's
/// record (an HTTP session's host keeps its own).
pub(crate) fn rewrite_lost<A>(
    host: &mut A,
    owed: RecordOwed,
    ctx: &mut A::Context,
) -> Option<RecordOwed>
where
    A: KeepsRecord,
    A::Context: AsyncContext<A> + ToEnvelope<A, RecordWritten>,
{
    let Some(kept) = host.record_and_session() else {
        return Some(owed);
    };
    kept.record.lost(owed);
    keep(host, ctx);
    None
}

/// A session id as logs show it: its beginning (as `SessionId`'s `Display`), not the id a
/// client resumes the session by.
fn log_id(id: &str) -> String {
    format!("{}…", id.get(..8).unwrap_or(id))
}

/// The confirmation `host` asked ([`confirm_held`]) came back: its inbox is drained now, or,
/// another node holding the session, the copy here ends, unanswered (that node answered its
/// requests).
pub(crate) fn hold_confirmed<A>(host: &mut A, done: &HoldConfirmed, ctx: &mut A::Context)
where
    A: KeepsRecord + crate::session::SessionHost,
    A::Context: AsyncContext<A> + ToEnvelope<A, RecordWritten>,
{
    let Some(kept) = host.record_and_session() else {
        return;
    };
    let record = kept.record;
    record.confirming = false;
    if done.held == Some(false) {
        tracing::info!(
            session = %log_id(&record.id),
            "session taken up by another node while this one was taken for dead; its copy here ends"
        );
        return host.taken_up_elsewhere(ctx);
    }
    if done.held.is_none() && done.mark.is_unconfirmed() {
        // Asked because a beat found the node taken for dead, not in a stall: that beat
        // reached Redis a moment ago, so the other nodes may reach it too, and take the
        // session up; Redis not answering the question says nothing of that. Asked again
        // shortly, the answers waiting (review 54 #5); should Redis stay away, the node
        // stalls within `SUSPECT_AFTER`, and a question in a stall that Redis cannot
        // answer lets them go. Beats landing all along, Redis answers the node but not
        // for this session (its shard of a Redis Cluster away, or its record unreadable):
        // no node can take it up either, and the answers go after `SUSPECT_AFTER` (review
        // 55 #7: they waited for good).
        let since = *record.unanswered_since.get_or_insert_with(Instant::now);
        if since.elapsed() < crate::cluster::SUSPECT_AFTER {
            // Marked as asking meanwhile: a drain before then does not ask at once (review
            // 56 #4: the questions went back to back).
            record.confirming = true;
            ctx.run_later(ASK_AGAIN_AFTER, |host: &mut A, ctx| {
                if let Some(kept) = host.record_and_session() {
                    kept.record.confirming = false;
                }
                host.drain_inbox(ctx);
            });
            return;
        }
    }
    record.unanswered_since = None;
    record.confirmed = done.mark;
    host.drain_inbox(ctx);
}

/// Redis lost what it held (it restarted empty): a session's host writes its record again
/// now, not when it is next due, and holds the [`RecordOwed`] until Redis took it (one that
/// keeps no record drops it).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct RecordsLost(pub(crate) RecordOwed);

/// A write of the record is done: the next may go.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct RecordWritten {
    /// How it ended.
    outcome: WriteOutcome,
}

/// How a write of a session's record ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteOutcome {
    /// Redis holds it.
    Written,
    /// Redis refused it: another node holds the session (it took the session up while this
    /// node could not reach Redis for longer than its heartbeat), and this copy is stale.
    HeldElsewhere,
    /// Redis could not be asked, or did not answer: the record there may be an older one, or
    /// none (Redis restarted empty), and is written again after `redis.retry_after_ms`.
    Failed,
}

/// An actor that hosts a session and keeps its record.
pub(crate) trait KeepsRecord: Actor + Handler<RecordWritten>
where
    Self::Context: AsyncContext<Self> + ToEnvelope<Self, RecordWritten>,
{
    /// The record and the session it is of, when this actor keeps one.
    fn record_and_session(&mut self) -> Option<Kept<'_>>;

    /// Another node holds the session now (a write of its record was refused): the record
    /// is no longer this node's to write or delete, and is dropped unwritten; the copy here
    /// ends, what runs here unanswered (that node answers it -32031, the node lost), and a
    /// socket still attached is let go as when its client reconnects elsewhere.
    fn taken_up_elsewhere(&mut self, ctx: &mut Self::Context);
}

/// What [`KeepsRecord`] lends to [`keep`].
pub(crate) struct Kept<'a> {
    /// The record.
    pub record: &'a mut SocketRecord,
    /// The session it is of.
    pub session: &'a Session,
    /// No socket is attached: answers wait for the client's reconnect, and die with the
    /// node if it dies first, so a request the record lists stays listed once answered.
    pub parked: bool,
}

/// The time to live of a WebSocket session's record: the HTTP idle timeout, or twice the
/// resume grace if longer (a parked session's record outlives its grace).
pub(crate) fn record_ttl(settings: &crate::config::Settings) -> Duration {
    Duration::from_millis(settings.sessions.http_idle_timeout_ms)
        .max(Duration::from_millis(settings.sessions.resume_grace_ms) * 2)
}

impl SocketRecord {
    /// The record of the session `id`, when sessions live in Redis and WebSocket sessions
    /// can be resumed (`None` otherwise: there is nothing to keep).
    pub(crate) fn new(shared: &Arc<Shared>, id: &SessionId) -> Option<Self> {
        let settings = &shared.settings;
        if !settings.sessions_in_redis() || settings.sessions.resume_grace_ms == 0 {
            return None;
        }
        Some(Self {
            shared: shared.clone(),
            id: id.as_str().to_owned(),
            ttl: record_ttl(settings),
            stored: None,
            writing: None,
            look_armed: false,
            confirmed: shared.cluster.hold_mark().unconfirmed(),
            confirming: false,
            unanswered_since: None,
            owed: None,
            owed_write_under_way: false,
        })
    }

    /// Redis lost the record (it restarted empty): it is due to be written again at the
    /// next look, changed or not, and `owed` is held until a write begun after lands. A
    /// record never written owes nothing.
    pub(crate) fn lost(&mut self, owed: RecordOwed) {
        if self.stored.is_some() {
            self.owed = Some(owed);
            // A write under way began before this loss: it does not pay for it.
            self.owed_write_under_way = false;
            self.due_again();
        }
    }

    /// The record is due to be written again at the next look, changed or not.
    fn due_again(&mut self) {
        if let Some(stored) = &mut self.stored {
            // No session's revision: taken for changed.
            stored.revision = u64::MAX;
        }
    }

    /// How often the host looks at the record in any case, so that a quiet session's record
    /// is written again before Redis lets it expire.
    pub(crate) fn refresh_every(&self) -> Duration {
        (self.ttl / 4).max(RECORD_AFTER)
    }

    /// The record came from another actor (the session was parked): its write under way now
    /// reports here, and this actor's timers do the looking.
    pub(crate) fn adopt<A>(&mut self, ctx: &mut A::Context)
    where
        A: KeepsRecord,
        A::Context: AsyncContext<A> + ToEnvelope<A, RecordWritten>,
    {
        self.look_armed = false;
        // A confirmation asked by the actor before reports to that one, gone: the new host
        // asks again at its first drain (review 53 #1: its answers waited for good).
        self.confirming = false;
        if let Some(under_way) = self.writing.take() {
            let host = ctx.address();
            self.writing = Some(actix::spawn(async move {
                let outcome = under_way.await.unwrap_or(WriteOutcome::Failed);
                host.do_send(RecordWritten { outcome });
                outcome
            }));
        }
    }

    /// The session ends on this node. While the node shuts down, the session may go on
    /// elsewhere: its record is handed over ([`hand_over`](Self::hand_over)), unless
    /// `by_client` (its client closed it, 1000); otherwise it ended for good and its record
    /// is deleted ([`forget`](Self::forget)). `parked`: as in [`Kept::parked`]; `owed`: as
    /// in [`hand_over`](Self::hand_over), asked only then.
    pub(crate) fn end(
        self,
        session: &Session,
        parked: bool,
        by_client: bool,
        owed: impl FnOnce() -> Vec<RequestId>,
    ) {
        if self.shared.is_draining() && !by_client {
            self.hand_over(session, parked, owed());
        } else {
            self.forget();
        }
    }

    /// The session ended: its record is deleted (after the write under way, which would
    /// otherwise bring it back), so that no node takes it up.
    fn forget(self) {
        if self.stored.is_none() && self.writing.is_none() {
            return;
        }
        // Counted as a last write: a session its client closes while the server stops
        // would otherwise keep its record, the delete dropped with its thread.
        let counted = LastWrite::begin(&self.shared.cluster);
        let cluster = self.shared.cluster.clone();
        let under_way = self.writing;
        let id = self.id;
        actix::spawn(async move {
            if let Some(under_way) = under_way {
                let _ = under_way.await;
            }
            if let Some(redis) = cluster.store.redis() {
                let node = cluster.node_number();
                redis.delete_held_session(&cluster.metrics, &id, node).await;
            }
            drop(counted);
        });
    }

    /// The node is shutting down and the session ends here: its record is written a last
    /// time (after the write under way) and kept, so that its client may resume it on
    /// another node. It lists what is still in flight, which ends here unanswered, however
    /// young (and, `parked`, what it listed: those answers end here too).
    /// `owed`: more requests owed an answer that this node's copy will not give (answers it
    /// kept for a reconnect, errors it owes from a node lost before it).
    pub(crate) fn hand_over(mut self, session: &Session, parked: bool, owed: Vec<RequestId>) {
        let now = Instant::now();
        let (mut in_flight, _) = session.in_flight_settled(now, Duration::ZERO);
        if parked {
            self.keep_listed(&mut in_flight);
        }
        for id in owed {
            if !in_flight.contains(&id) {
                in_flight.push(id);
            }
        }
        let Some(write) = self.write(session, in_flight, now, false) else {
            return;
        };
        let under_way = self.writing.take();
        let owed = self.owed.take();
        // Counted until done or dropped: the server's stop waits for it (it would be
        // dropped with its thread, and another node would answer again what was answered
        // here).
        let counted = LastWrite::begin(&self.shared.cluster);
        actix::spawn(async move {
            if let Some(under_way) = under_way {
                let _ = under_way.await;
            }
            write.await;
            drop((counted, owed));
        });
    }

    /// Adds to `in_flight` what the record last written listed.
    fn keep_listed(&self, in_flight: &mut Vec<RequestId>) {
        if let Some(stored) = &self.stored {
            for id in &stored.in_flight {
                if !in_flight.contains(id) {
                    in_flight.push(id.clone());
                }
            }
        }
    }

    /// The write of `session`'s record as of `now`, if it differs from the last one written
    /// (and that one is [`RECORD_AFTER`] old) or is due for its time to live; and when to
    /// look again: when a request comes of age, or the spacing of writes ends. `parked`:
    /// the requests listed stay listed (see [`Kept::parked`]).
    fn next_write(
        &mut self,
        session: &Session,
        parked: bool,
        now: Instant,
    ) -> (
        Option<impl Future<Output = WriteOutcome> + 'static>,
        Option<Instant>,
    ) {
        let revision = session.revision();
        if revision == 0 {
            // Not initialized: there is nothing to take up.
            return (None, None);
        }
        let (mut in_flight, comes_of_age) = session.in_flight_settled(now, RECORD_AFTER);
        if parked {
            self.keep_listed(&mut in_flight);
        }
        if let Some(stored) = &self.stored {
            let since = now.saturating_duration_since(stored.at);
            let changed = stored.revision != revision
                || stored.in_flight.len() != in_flight.len()
                || in_flight.iter().any(|id| !stored.in_flight.contains(id));
            if !changed && since < self.ttl / 4 {
                return (None, comes_of_age);
            }
            if since < RECORD_AFTER {
                let spacing_ends = stored.at + RECORD_AFTER;
                let again = comes_of_age.map_or(spacing_ends, |at| at.min(spacing_ends));
                return (None, Some(again));
            }
        }
        (self.write(session, in_flight, now, true), comes_of_age)
    }

    /// The write of `session`'s record listing `in_flight`, remembered as written at `now`
    /// (`None` if the session has no record yet); `held`: as held by this node (else as
    /// handed over). Either is written only while this node holds the record (or there is
    /// none); the write's output says whether it was refused because another node does.
    fn write(
        &mut self,
        session: &Session,
        in_flight: Vec<RequestId>,
        now: Instant,
        held: bool,
    ) -> Option<impl Future<Output = WriteOutcome> + 'static> {
        let mut record = session.record()?;
        record.websocket = true;
        record.node = held.then(|| self.shared.cluster.node_number());
        record.in_flight = in_flight
            .iter()
            .filter_map(|id| serde_json::value::RawValue::from_string(id.as_json().to_owned()).ok())
            .collect();
        let json = serde_json::to_string(&record).ok()?;
        self.owed_write_under_way = self.owed.is_some();
        self.stored = Some(Stored {
            revision: record.revision,
            in_flight,
            at: now,
        });
        let cluster = self.shared.cluster.clone();
        let id = self.id.clone();
        let ttl = self.ttl;
        Some(async move {
            let Some(redis) = cluster.store.redis() else {
                return WriteOutcome::Failed;
            };
            let node = cluster.node_number();
            match redis
                .put_held_session(&cluster.metrics, &id, json, ttl, node)
                .await
            {
                Some(true) => WriteOutcome::Written,
                Some(false) => WriteOutcome::HeldElsewhere,
                None => WriteOutcome::Failed,
            }
        })
    }
}

/// Writes the record of the session `host` keeps, if it changed (see the module docs).
/// Asked after every frame and inbox drain: without a record, or with a write under way or
/// a look scheduled, this is all it costs.
#[inline]
pub(crate) fn keep<A>(host: &mut A, ctx: &mut A::Context)
where
    A: KeepsRecord,
    A::Context: AsyncContext<A> + ToEnvelope<A, RecordWritten>,
{
    if let Some(kept) = host.record_and_session() {
        if kept.record.writing.is_none() && !kept.record.look_armed {
            look(host, ctx);
        }
    }
}

/// The write under way of the record `host` keeps is done ([`RecordWritten`]): a change
/// made meanwhile is written now, unless the write was refused because another node holds
/// the session ([`KeepsRecord::taken_up_elsewhere`]). One that failed (the record in Redis
/// may be an older one, or none after Redis restarted empty, and another node would not find
/// the session) is written again after `redis.retry_after_ms`, changed or not; the wait
/// holds back the writes of changes made meanwhile, so that a session busy in an outage
/// asks Redis once a wait, not once per [`RECORD_AFTER`].
pub(crate) fn written<A>(host: &mut A, ctx: &mut A::Context, done: RecordWritten)
where
    A: KeepsRecord,
    A::Context: AsyncContext<A> + ToEnvelope<A, RecordWritten>,
{
    let Some(kept) = host.record_and_session() else {
        return;
    };
    let record = kept.record;
    record.writing = None;
    let owed_write = std::mem::take(&mut record.owed_write_under_way);
    match done.outcome {
        WriteOutcome::Written => {
            if owed_write {
                record.owed = None;
            }
            keep(host, ctx);
        }
        WriteOutcome::HeldElsewhere => {
            tracing::info!(
                session = %log_id(&record.id),
                "session taken up by another node while this one could not reach Redis; its copy here ends"
            );
            host.taken_up_elsewhere(ctx);
        }
        WriteOutcome::Failed => {
            // Due again, changed or not (what it wrote did not land).
            record.due_again();
            if record.look_armed {
                // A look comes within [`RECORD_AFTER`]; if its write fails too, this wait
                // is armed then.
                return;
            }
            record.look_armed = true;
            let wait = Duration::from_millis(record.shared.settings.redis.retry_after_ms)
                .max(RECORD_AFTER);
            ctx.run_later(wait, |host: &mut A, ctx| {
                if let Some(kept) = host.record_and_session() {
                    kept.record.look_armed = false;
                }
                keep(host, ctx);
            });
        }
    }
}

/// [`keep`] past its cheap checks.
fn look<A>(host: &mut A, ctx: &mut A::Context)
where
    A: KeepsRecord,
    A::Context: AsyncContext<A> + ToEnvelope<A, RecordWritten>,
{
    let Some(Kept {
        record,
        session,
        parked,
    }) = host.record_and_session()
    else {
        return;
    };
    let now = Instant::now();
    let (write, look_again) = record.next_write(session, parked, now);
    if let Some(write) = write {
        let host = ctx.address();
        record.writing = Some(actix::spawn(async move {
            let outcome = write.await;
            host.do_send(RecordWritten { outcome });
            outcome
        }));
    }
    if let Some(at) = look_again {
        record.look_armed = true;
        ctx.run_later(at.saturating_duration_since(now), |host: &mut A, ctx| {
            if let Some(kept) = host.record_and_session() {
                kept.record.look_armed = false;
            }
            keep(host, ctx);
        });
    }
}
