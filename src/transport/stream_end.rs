//! Who answers the requests of a POST's SSE stream once its node may have been taken for
//! dead (sessions in Redis): the node running them, on the POST's stream, or a node that
//! follows the stream from the mirror after its client resumed it there, and found that node
//! dead (-32031 `nodeLost`). Exactly one of them, decided in Redis. (Attack run 51, N3: a
//! node stopped past its alive time went on and sent its answer on the POST's stream, which
//! the client still read, after the node the client resumed the stream on had answered it
//! -32031: two final answers for one request.)
//!
//! The protocol, on one key per stream (`<key_prefix>stream-end:{<session>}:<stream>`, so
//! it works on a Redis Cluster too), each step one compare-and-set in a Lua script:
//!
//! - A follower that finds the stream's node dead (its alive key gone: no beat for 3 s;
//!   the follower's own beats landing steadily meanwhile, `Cluster::judges_others`)
//!   claims the stream `lost` before it answers anything, unless the key says `held`: the
//!   node went on and claimed the stream since, so the follower goes on following (that node
//!   lives, and mirrors its answers). `lost` is kept for [`lost_ttl`]. Redis out of reach,
//!   the follower answers nothing (the stream ends; its client may resume it again).
//! - The stream's node, before it sends anything on its streams after it may have been taken
//!   for dead (`Cluster::may_be_taken_for_dead`: a beat found its last one gone, or none
//!   reached Redis for 2 s), claims each of its POST streams the mirror knows `held` for
//!   [`LEASE`], unless the key says `lost`: then it drops that stream's answers (their
//!   client had -32031 for them) and ends the stream without them. The session's inbox, where
//!   its answers come from, waits for the claims. Redis out of reach, the answers go on:
//!   when no node reaches Redis, none can claim a stream lost.
//! - `held` is a lease, so that a node that claimed a stream and then died for real is still
//!   found dead and its requests answered: the follower's claim succeeds once the lease is
//!   over. While the node goes on without a beat landing (its stall goes on), it claims its
//!   streams again every [`COVER`], well within the lease, and a stream the mirror came to
//!   know since, before its first frame; once a beat lands, the node is alive to the others,
//!   who claim nothing while it is, until it stalls again (asked again then). A node not
//!   stalled has its answers cost nothing more than a look at its beats, no Redis round trip.
//!
//! Windows left:
//! - An answer the node sent before it knew it stalled (its last beat under 2 s old) and
//!   that reached its client only after the stall (the node stopped between the two, for
//!   a second or more: the others find it dead 3 s after its last beat) still follows a
//!   follower's -32031: the claim is made before an answer is sent, not before it is
//!   written to the connection.
//! - A node cut off from Redis alone (its claims unanswered, the others reaching Redis) goes
//!   on answering, and a follower may claim its streams lost after its 3 s: two answers, as
//!   for a WebSocket session (`socket_record::confirm_held`).
//! - A node stalled for longer than [`lost_ttl`] finds `lost` gone and answers too.
//! - Redis that restarted empty: a live node's alive key is gone until its next beat (within
//!   a second), and a follower may claim its stream lost meanwhile; that node's answers
//!   until that beat finds it taken for dead still go out.
//! - Answers the node gives at once, not through the session's inbox (the errors of its
//!   shutdown's end), are not held for the claims (once a stream is found lost, they are
//!   dropped with the others).
//!
//! A stream found lost ends on its node, its end mirrored; its requests run to their end
//! there, their answers dropped. A resume of it, on any node, is answered -32031 again: it
//! is followed from the mirror, which holds it ended unanswered, and the follower finds it
//! `lost` (on its own node too, which remembers the last streams it found lost; one
//! forgotten is replayed from its log, without an answer).

use crate::cluster::{Cluster, HoldMark};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a node's claim of its stream (`held`) holds the followers off, and how long its
/// claims cover the answers of a stall that goes on: shared with the claims of tasks.
pub(crate) use crate::cluster::{HOLD_COVER as COVER, HOLD_LEASE as LEASE};

/// How long Redis keeps a stream's `lost`: as long as a request may run
/// (`limits.max_request_timeout_ms`, past which its node answers it with a timeout), or the
/// session's idle timeout if longer. A node stalled for longer finds it gone.
pub(crate) fn lost_ttl(settings: &crate::config::Settings) -> Duration {
    Duration::from_millis(
        settings
            .limits
            .max_request_timeout_ms
            .max(settings.sessions.http_idle_timeout_ms),
    )
}

/// An HTTP session's claims of its POST streams' ends (sessions in Redis); see the module
/// docs.
pub(crate) struct StreamClaims {
    /// Where the node stood at the last claims (see [`Cluster::may_be_taken_for_dead`]).
    mark: HoldMark,
    /// In a stall, once Redis answered the last claims: until when they cover the session's
    /// answers (the stall going on, they are made again then).
    covered_until: Option<Instant>,
    /// Claims are under way: the session's inbox waits for them.
    claiming: bool,
    /// Since when claims made for a beat's finding went unanswered (see
    /// [`settle`](Self::settle)).
    unanswered_since: Option<Instant>,
}

/// How long after claims made for a beat's finding went unanswered they are made again.
pub(crate) use crate::cluster::CLAIM_AGAIN_AFTER;

/// What the session's inbox does now ([`StreamClaims::due`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Due {
    /// It is drained: no claim is needed.
    No,
    /// It waits for the claims under way.
    Wait,
    /// It waits for claims to be made now.
    Claim,
}

/// How the claims of a session's streams went ([`StreamClaims::begin`]).
pub(crate) struct Claimed {
    /// The streams found lost (answered -32031 by another node; the others are held), or
    /// `None` when Redis did not answer.
    lost: Option<Vec<u64>>,
    /// Where the node stood when they were made.
    mark: HoldMark,
    /// In a stall: until when they cover the answers, if Redis answered them all.
    covered_until: Option<Instant>,
}

impl StreamClaims {
    /// No claim made yet: made at the node's first stall, whenever it comes.
    pub(crate) fn new(cluster: &Cluster) -> Self {
        Self {
            mark: cluster.hold_mark().unconfirmed(),
            covered_until: None,
            claiming: false,
            unanswered_since: None,
        }
    }

    /// Whether the session's inbox may be drained now (answers go on its streams), waits for
    /// claims under way, or waits for claims to be made. `new_streams`: whether the mirror
    /// came to know a POST stream since the last claims (asked only in a stall they cover).
    /// A node not stalled costs a look at its beats.
    #[inline]
    pub(crate) fn due(&mut self, cluster: &Cluster, new_streams: impl FnOnce() -> bool) -> Due {
        if self.claiming {
            return Due::Wait;
        }
        if cluster.may_be_taken_for_dead(self.mark) {
            return Due::Claim;
        }
        let Some(until) = self.covered_until else {
            return Due::No;
        };
        if !cluster.stalled() {
            // A beat landed: the node is alive to the others.
            self.covered_until = None;
            return Due::No;
        }
        if Instant::now() >= until || new_streams() {
            Due::Claim
        } else {
            Due::No
        }
    }

    /// Claims `streams` of session `id` for this node: the claims to run, whose outcome goes
    /// to [`settle`](Self::settle); `None` when there is nothing to claim (the claims count
    /// as made).
    pub(crate) fn begin(
        &mut self,
        cluster: &Arc<Cluster>,
        id: &str,
        streams: Vec<u64>,
    ) -> Option<impl Future<Output = Claimed> + 'static> {
        // Claims made in a stall cover that stall (for `COVER` at a time); made because a
        // beat found the node taken for dead, that finding only: a stall after it is asked
        // about again (as `socket_record::confirm_held`'s question).
        let now = cluster.hold_mark();
        let stalled = cluster.stalled_at(now);
        let mark = if stalled { now } else { now.unconfirmed() };
        let covered_until = stalled.then(|| Instant::now() + COVER);
        if streams.is_empty() {
            self.mark = mark;
            self.covered_until = covered_until;
            // That finding is settled (review 56 #5: an unanswered round's start counted
            // against the next finding's).
            self.unanswered_since = None;
            return None;
        }
        self.claiming = true;
        let cluster = cluster.clone();
        let id = id.to_owned();
        Some(async move {
            let held = match cluster.store.redis() {
                Some(redis) => {
                    redis
                        .claim_streams_held(&cluster.metrics, &id, &streams, LEASE)
                        .await
                }
                None => None,
            };
            let lost = held.map(|held| {
                streams
                    .iter()
                    .zip(held)
                    .filter(|(_, held)| !held)
                    .map(|(stream, _)| *stream)
                    .collect()
            });
            Claimed {
                lost,
                mark,
                covered_until,
            }
        })
    }

    /// The wait [`settle`](Self::settle) asked for is over: the claims are made again at the
    /// next drain.
    pub(crate) fn wait_over(&mut self) {
        self.claiming = false;
    }

    /// The claims begun are done: the streams found lost (their answers are dropped, and they
    /// end), and whether the claims are to be made again after [`CLAIM_AGAIN_AFTER`], the
    /// answers waiting. Claims Redis did not answer in a stall cover it until a beat lands
    /// (asked again at each answer, every answer would wait for Redis's timeout in an
    /// outage). Made for a beat's finding, not in a stall, they are made again, for up to
    /// `SUSPECT_AFTER`: that beat reached Redis a moment ago, so the other nodes may too
    /// (review 55 #3, as `socket_record::hold_confirmed` does since review 54 #5).
    pub(crate) fn settle(&mut self, claimed: Claimed) -> (Vec<u64>, bool) {
        self.claiming = false;
        let answered = claimed.lost.is_some();
        let lost = claimed.lost.unwrap_or_default();
        if !answered && claimed.mark.is_unconfirmed() {
            let since = *self.unanswered_since.get_or_insert_with(Instant::now);
            if since.elapsed() < crate::cluster::SUSPECT_AFTER {
                // The mark is left as it was: the drain after the wait claims again, and
                // none before it (review 56 #4: the rounds went back to back).
                self.claiming = true;
                return (lost, true);
            }
        }
        self.unanswered_since = None;
        self.mark = claimed.mark;
        self.covered_until = claimed.covered_until.filter(|_| answered);
        (lost, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::testing::{cluster, stall};

    /// Runs `begin`'s claims (no Redis here: they come back unanswered).
    async fn unanswered(
        claims: &mut StreamClaims,
        cluster: &Arc<Cluster>,
        streams: &[u64],
    ) -> Claimed {
        let claimed = claims
            .begin(cluster, "session", streams.to_vec())
            .expect("streams to claim")
            .await;
        assert!(claimed.lost.is_none(), "no Redis, no answer");
        claimed
    }

    #[tokio::test]
    async fn a_node_not_taken_for_dead_claims_nothing() {
        let cluster = cluster();
        let mut claims = StreamClaims::new(&cluster);
        cluster.note_beat(true);
        cluster.note_beat(true);
        assert_eq!(claims.due(&cluster, || true), Due::No);
    }

    #[tokio::test]
    async fn a_beats_finding_is_claimed_and_the_streams_found_lost_are_told() {
        let cluster = cluster();
        let mut claims = StreamClaims::new(&cluster);
        cluster.note_beat(true);
        // A beat finds this node's last one gone: taken for dead.
        cluster.note_beat(false);
        assert_eq!(claims.due(&cluster, || false), Due::Claim);
        let begun = claims.begin(&cluster, "session", vec![1, 2, 3]);
        assert!(begun.is_some());
        assert_eq!(
            claims.due(&cluster, || false),
            Due::Wait,
            "claims under way"
        );
        // Redis answered: stream 2 was claimed lost by a follower.
        let mark = cluster.hold_mark().unconfirmed();
        let (lost, again) = claims.settle(Claimed {
            lost: Some(vec![2]),
            mark,
            covered_until: None,
        });
        assert_eq!(lost, vec![2]);
        assert!(!again);
        assert_eq!(
            claims.due(&cluster, || true),
            Due::No,
            "that finding is settled"
        );
        // The next beat that finds it so again is claimed again.
        cluster.note_beat(false);
        assert_eq!(claims.due(&cluster, || false), Due::Claim);
    }

    #[tokio::test]
    async fn claims_unanswered_for_a_beats_finding_are_made_again_for_a_while_then_given_up() {
        let cluster = cluster();
        let mut claims = StreamClaims::new(&cluster);
        cluster.note_beat(true);
        cluster.note_beat(false);
        assert_eq!(claims.due(&cluster, || false), Due::Claim);
        let claimed = unanswered(&mut claims, &cluster, &[7]).await;
        let (lost, again) = claims.settle(claimed);
        assert!(lost.is_empty());
        assert!(again, "asked again after a wait");
        assert_eq!(
            claims.due(&cluster, || false),
            Due::Wait,
            "no claims back to back"
        );
        claims.wait_over();
        assert_eq!(
            claims.due(&cluster, || false),
            Due::Claim,
            "the finding still stands"
        );
        // Past `SUSPECT_AFTER` since the first unanswered round, it is given up: the answers
        // go on.
        claims.unanswered_since = Instant::now().checked_sub(crate::cluster::SUSPECT_AFTER);
        let claimed = unanswered(&mut claims, &cluster, &[7]).await;
        let (lost, again) = claims.settle(claimed);
        assert!(lost.is_empty());
        assert!(!again);
        assert_eq!(claims.due(&cluster, || true), Due::No);
        assert!(claims.unanswered_since.is_none(), "forgotten once settled");
    }

    #[tokio::test]
    async fn claims_in_a_stall_cover_it_for_a_while_and_a_new_stream_is_claimed_before_its_first_frame(
    ) {
        let cluster = cluster();
        let mut claims = StreamClaims::new(&cluster);
        cluster.note_beat(true);
        stall(&cluster, Duration::from_secs(10));
        assert_eq!(claims.due(&cluster, || false), Due::Claim);
        let begun = claims.begin(&cluster, "session", vec![1]);
        assert!(begun.is_some());
        let mark = cluster.hold_mark();
        let covered_until = Instant::now() + COVER;
        let (lost, again) = claims.settle(Claimed {
            lost: Some(Vec::new()),
            mark,
            covered_until: Some(covered_until),
        });
        assert!(lost.is_empty() && !again);
        assert_eq!(claims.due(&cluster, || false), Due::No, "covered");
        assert_eq!(
            claims.due(&cluster, || true),
            Due::Claim,
            "a stream the claims did not cover"
        );
        // Covered no longer: claimed again while the stall goes on.
        claims.covered_until = Some(Instant::now());
        assert_eq!(claims.due(&cluster, || false), Due::Claim);
        // A beat lands: the node is alive to the others, nothing is claimed.
        claims.covered_until = Some(covered_until);
        cluster.note_beat(true);
        assert_eq!(claims.due(&cluster, || true), Due::No);
        assert!(claims.covered_until.is_none());
    }

    #[tokio::test]
    async fn claims_unanswered_in_a_stall_cover_it_until_a_beat_lands() {
        let cluster = cluster();
        let mut claims = StreamClaims::new(&cluster);
        cluster.note_beat(true);
        stall(&cluster, Duration::from_secs(10));
        assert_eq!(claims.due(&cluster, || false), Due::Claim);
        let claimed = unanswered(&mut claims, &cluster, &[1, 2]).await;
        let (lost, again) = claims.settle(claimed);
        assert!(lost.is_empty());
        assert!(!again, "Redis out of reach in a stall: the answers go on");
        assert_eq!(
            claims.due(&cluster, || true),
            Due::No,
            "not asked at each answer"
        );
        // The next stall, after a beat landed, is asked about.
        cluster.note_beat(true);
        stall(&cluster, Duration::from_secs(5));
        assert_eq!(claims.due(&cluster, || false), Due::Claim);
    }

    #[tokio::test]
    async fn no_stream_to_claim_settles_the_finding_at_once() {
        let cluster = cluster();
        let mut claims = StreamClaims::new(&cluster);
        cluster.note_beat(true);
        cluster.note_beat(false);
        claims.unanswered_since = Some(Instant::now());
        assert_eq!(claims.due(&cluster, || false), Due::Claim);
        assert!(claims.begin(&cluster, "session", Vec::new()).is_none());
        assert_eq!(claims.due(&cluster, || true), Due::No);
        assert!(claims.unanswered_since.is_none());
    }
}
