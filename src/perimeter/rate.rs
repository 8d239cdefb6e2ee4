//! The request rate per identity: one token bucket per identity, shared by all of its
//! sessions on this node. An authenticated identity is known by its subject; an anonymous
//! client by its IP address (otherwise every anonymous client would share one bucket).
//!
//! A session keeps its identity's bucket once it has it ([`SessionBucket`]), so its requests
//! take a token without a map lookup; a bucket a session holds is never dropped from the map,
//! so every session of an identity keeps sharing one bucket.
//!
//! Memory is bounded: at most `max_identities` buckets not held by a session (those held are
//! bounded by the session cap). A bucket that has refilled completely holds nothing a new one
//! would not, so when the map is full such idle buckets are dropped first (a sweep, at most
//! once per refill time); if none is idle, the fullest of a small sample is dropped, which
//! gives that identity a fresh bucket a little early rather than letting the map grow or
//! refusing newcomers.

use crate::config::RateSettings;
use crate::mailbox::throttle::{Rate, TokenBucket};
use dashmap::DashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::{lock, FastHash};

/// Buckets looked at when a full map has no idle bucket to drop.
const EVICTION_SAMPLE: usize = 32;

/// See the module docs.
#[derive(Debug)]
pub struct RateLimiter {
    rate: Rate,
    max_buckets: usize,
    /// Authenticated identities by subject (looked up by `&str`, so a hit allocates nothing).
    by_subject: DashMap<Box<str>, Arc<Bucket>, FastHash>,
    /// Anonymous clients by IP address (`None`: no address, e.g. an in-process session).
    by_address: DashMap<Option<IpAddr>, Arc<Bucket>, FastHash>,
    /// Time base of `last_sweep_ms`.
    epoch: Instant,
    /// When full maps were last swept for idle buckets, in ms since `epoch` (0: never).
    last_sweep_ms: AtomicU64,
}

/// One identity's token bucket, shared by its sessions.
#[derive(Debug, Default)]
pub struct Bucket(Mutex<TokenBucket>);

impl Bucket {
    fn get(&self) -> TokenBucket {
        *lock(&self.0)
    }

    fn take(&self, rate: &Rate, now: Instant) -> Result<(), Duration> {
        rate.take(&mut lock(&self.0), now)
    }
}

/// The bucket a session's requests take their tokens from, found on its first request.
#[derive(Debug, Default)]
pub struct SessionBucket(OnceLock<Arc<Bucket>>);

/// Who a bucket belongs to.
#[derive(Debug, Clone, Copy)]
pub enum Holder<'a> {
    /// An authenticated identity's subject.
    Subject(&'a str),
    /// An anonymous client's address.
    Address(Option<IpAddr>),
}

impl RateLimiter {
    /// The limiter the settings ask for; `None` when the rate is unlimited.
    pub fn new(settings: &RateSettings) -> Option<Self> {
        (settings.requests_per_second > 0.0).then(|| Self {
            rate: Rate::new(settings.requests_per_second, settings.burst),
            max_buckets: settings.max_identities.max(1),
            by_subject: DashMap::default(),
            by_address: DashMap::default(),
            epoch: Instant::now(),
            last_sweep_ms: AtomicU64::new(0),
        })
    }

    /// Takes a token from `holder`'s bucket at `now` (the caller's clock read: the request's
    /// arrival). The bucket is looked up once per session and kept in `held` (a session's
    /// holder never changes); a fresh `held` serves a request outside any session.
    ///
    /// # Errors
    /// How long until a token is there, when there is none now.
    pub fn take(
        &self,
        held: &SessionBucket,
        holder: Holder<'_>,
        now: Instant,
    ) -> Result<(), Duration> {
        held.0
            .get_or_init(|| self.bucket(holder, now))
            .take(&self.rate, now)
    }

    /// `holder`'s bucket, made (room permitting, see the module docs) when it has none.
    fn bucket(&self, holder: Holder<'_>, now: Instant) -> Arc<Bucket> {
        match holder {
            Holder::Subject(subject) => {
                if let Some(bucket) = self.by_subject.get(subject) {
                    return bucket.clone();
                }
                self.make_room(now);
                self.by_subject
                    .entry(Box::from(subject))
                    .or_default()
                    .clone()
            }
            Holder::Address(address) => {
                if let Some(bucket) = self.by_address.get(&address) {
                    return bucket.clone();
                }
                self.make_room(now);
                self.by_address.entry(address).or_default().clone()
            }
        }
    }

    /// Buckets held now.
    pub fn len(&self) -> usize {
        self.by_subject.len() + self.by_address.len()
    }

    /// Makes room for one more bucket when the maps are full.
    fn make_room(&self, now: Instant) {
        if self.len() < self.max_buckets {
            return;
        }
        // An empty bucket is full again after its refill time: sweeping more often than
        // that finds little, and each sweep walks every bucket.
        let refill_ms = self.rate.refill_time().as_millis() as u64;
        let now_ms = (now.saturating_duration_since(self.epoch).as_millis() as u64).max(1);
        let last = self.last_sweep_ms.load(Ordering::Relaxed);
        if (last == 0 || now_ms.saturating_sub(last) >= refill_ms)
            && self
                .last_sweep_ms
                .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.by_subject.retain(|_, bucket| self.keeps(bucket, now));
            self.by_address.retain(|_, bucket| self.keeps(bucket, now));
        }
        if self.len() < self.max_buckets {
            return;
        }
        let subject = self.fullest(&self.by_subject, now);
        let address = self.fullest(&self.by_address, now);
        match (subject, address) {
            (Some((subject, s)), Some((_, a))) if s > a => {
                self.by_subject.remove(&subject);
            }
            (_, Some((address, _))) => {
                self.by_address.remove(&address);
            }
            (Some((subject, _)), None) => {
                self.by_subject.remove(&subject);
            }
            (None, None) => {}
        }
    }

    /// Whether a sweep keeps `bucket`: a session holds it, or it has not refilled yet.
    fn keeps(&self, bucket: &Arc<Bucket>, now: Instant) -> bool {
        Arc::strong_count(bucket) > 1 || !self.rate.is_full(&bucket.get(), now)
    }

    /// The fullest bucket among the first few of `map` that no session holds, and its tokens.
    fn fullest<K: Hash + Eq + Clone>(
        &self,
        map: &DashMap<K, Arc<Bucket>, FastHash>,
        now: Instant,
    ) -> Option<(K, f64)> {
        map.iter()
            .take(EVICTION_SAMPLE)
            .filter(|entry| Arc::strong_count(entry.value()) == 1)
            .map(|entry| {
                (
                    entry.key().clone(),
                    self.rate.tokens(&entry.value().get(), now),
                )
            })
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request outside any session: its bucket is not held afterwards.
    fn fresh() -> SessionBucket {
        SessionBucket::default()
    }

    fn limiter(per_second: f64, burst: u32, max_identities: usize) -> RateLimiter {
        RateLimiter::new(&RateSettings {
            requests_per_second: per_second,
            burst,
            max_identities,
        })
        .expect("a rate is set")
    }

    #[test]
    fn no_rate_no_limiter() {
        assert!(RateLimiter::new(&RateSettings::default()).is_none());
    }

    #[test]
    fn a_bucket_gives_its_burst_then_says_how_long_to_wait() {
        // One token a second: nothing refills noticeably during the test.
        let limiter = limiter(1.0, 3, 10);
        let alice = Holder::Subject("alice");
        for _ in 0..3 {
            assert_eq!(limiter.take(&fresh(), alice, Instant::now()), Ok(()));
        }
        let wait = limiter
            .take(&fresh(), alice, Instant::now())
            .expect_err("the burst is spent");
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
        // Another identity, and an anonymous address, have buckets of their own.
        assert_eq!(
            limiter.take(&fresh(), Holder::Subject("bob"), Instant::now()),
            Ok(())
        );
        assert_eq!(
            limiter.take(&fresh(), Holder::Address(None), Instant::now()),
            Ok(())
        );
    }

    #[test]
    fn a_spent_bucket_refills() {
        let limiter = limiter(1000.0, 1, 10);
        let holder = Holder::Address(Some([127, 0, 0, 1].into()));
        assert_eq!(limiter.take(&fresh(), holder, Instant::now()), Ok(()));
        let deadline = Instant::now() + Duration::from_secs(10);
        // Eventually served again (a token takes a millisecond to refill).
        while limiter.take(&fresh(), holder, Instant::now()).is_err() {
            assert!(Instant::now() < deadline, "never refilled");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn memory_stays_bounded_when_every_bucket_is_busy() {
        let limiter = limiter(0.001, 2, 8);
        for i in 0..1000 {
            let subject = format!("user-{i}");
            let _ = limiter.take(&fresh(), Holder::Subject(&subject), Instant::now());
            assert!(limiter.len() <= 8, "{} buckets", limiter.len());
        }
    }

    #[test]
    fn idle_buckets_are_swept_first() {
        let limiter = limiter(1_000_000.0, 1, 4);
        for i in 0..4 {
            let _ = limiter.take(
                &fresh(),
                Holder::Subject(&format!("idle-{i}")),
                Instant::now(),
            );
        }
        std::thread::sleep(Duration::from_millis(5));
        // All four refilled: the next newcomer sweeps them all away.
        let _ = limiter.take(&fresh(), Holder::Subject("new"), Instant::now());
        assert_eq!(limiter.len(), 1);
    }

    #[test]
    fn the_sessions_of_an_identity_share_its_bucket() {
        let limiter = limiter(1.0, 2, 10);
        let (first, second) = (SessionBucket::default(), SessionBucket::default());
        let alice = Holder::Subject("alice");
        let now = Instant::now();
        assert_eq!(limiter.take(&first, alice, now), Ok(()));
        assert_eq!(limiter.take(&second, alice, now), Ok(()));
        // One bucket for both sessions (and for requests outside a session): the burst of
        // two is spent.
        assert!(limiter.take(&first, alice, now).is_err());
        assert!(limiter.take(&fresh(), alice, now).is_err());
        assert_eq!(limiter.len(), 1);
    }

    #[test]
    fn a_bucket_a_session_holds_is_never_dropped() {
        let limiter = limiter(1_000_000.0, 1, 1);
        let held = SessionBucket::default();
        let _ = limiter.take(&held, Holder::Subject("held"), Instant::now());
        std::thread::sleep(Duration::from_millis(5));
        // Refilled, so idle; but a session holds it: the newcomer gets room beside it.
        let _ = limiter.take(&fresh(), Holder::Subject("new"), Instant::now());
        assert_eq!(limiter.len(), 2);
        let in_map = limiter.by_subject.get("held").expect("kept").clone();
        assert!(Arc::ptr_eq(held.0.get().expect("taken"), &in_map));
        // Once the session is gone, it is an idle bucket like any other.
        drop(held);
        drop(in_map);
        std::thread::sleep(Duration::from_millis(5));
        let _ = limiter.take(&fresh(), Holder::Subject("third"), Instant::now());
        assert!(limiter.by_subject.get("held").is_none());
    }
}
