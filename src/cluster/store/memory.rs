//! The in-memory backend: one node's own de-duplication entries and signature nonces,
//! bounded by count, bytes and age. It is the store without Redis, and the fallback while
//! Redis is away.
//!
//! Each map sits behind a `Mutex` held only for a lookup and an insert (never across an
//! await); only requests with an idempotency key or a signature take it, so the hot path of
//! everything else never does.

use super::{Claim, ClaimId, Key};
use crate::{lock, FastHash};
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A node's own de-duplication entries; see the module docs.
pub(crate) struct MemoryStore {
    entries: Mutex<Entries>,
    max_entries: usize,
    max_bytes: usize,
}

/// A node's own signature nonces, each kept for the time it is given, in a share of its own for
/// each signer: one signer that fills its share is refused, the others sign on. Only
/// configured signers (`signatures.public_keys`) claim nonces, so the signers tracked are
/// bounded by the configuration. See the module docs.
pub(crate) struct NonceCache {
    by_signer: Mutex<HashMap<String, Nonces, FastHash>>,
    per_signer: usize,
}

#[derive(Default)]
struct Entries {
    map: HashMap<Key, Slot, FastHash>,
    /// Keys in insertion order, each with the generation it was inserted as: the oldest is
    /// evicted first, and a key re-inserted since is skipped.
    order: VecDeque<(Key, u64)>,
    /// Bytes of the results held.
    bytes: usize,
    next_generation: u64,
}

struct Slot {
    entry: Claim,
    expires: Instant,
    generation: u64,
}

impl Slot {
    fn bytes(&self) -> usize {
        match &self.entry {
            Claim::Running { .. } | Claim::Unkept { .. } => 0,
            Claim::Done { result, .. } => result.len(),
        }
    }
}

#[derive(Default)]
struct Nonces {
    /// When each nonce may be forgotten.
    map: HashMap<Key, Instant, FastHash>,
    /// In insertion order, which is nearly expiry order: a nonce lives twice the skew, or
    /// up to the skew more for a request dated ahead (see `perimeter::signature`), so one
    /// may wait behind a longer-lived one for up to that much. Every key here is in `map`
    /// and the other way round.
    order: VecDeque<(Key, Instant)>,
    /// When a full share was last swept of the nonces expired behind longer-lived ones (at
    /// most once a second: a signer that keeps its share full would have every request walk
    /// all of it).
    swept_at: Option<Instant>,
}

/// How often a signer's full share of nonces may be swept (see `Nonces::swept_at`).
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// A nonce could not be recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NonceRefused {
    /// Seen before, within its lifetime.
    Replayed,
    /// The cache is full of live nonces.
    Full,
}

impl MemoryStore {
    pub(crate) fn new(max_entries: usize, max_bytes: usize) -> Self {
        Self {
            entries: Mutex::default(),
            max_entries,
            max_bytes,
        }
    }

    /// The live entry under `key`, or, when there is none, `Running` for `owner` is put
    /// there for `ttl` and `None` is returned (the caller runs the request).
    pub(crate) fn claim(&self, key: &Key, running: Claim, ttl: Duration) -> Option<Claim> {
        let now = Instant::now();
        let mut entries = lock(&self.entries);
        if let Some(slot) = entries.map.get(key) {
            if slot.expires > now {
                return Some(slot.entry.clone());
            }
        }
        self.insert(&mut entries, *key, running, now, ttl);
        None
    }

    /// Puts `done` under `key` for `ttl`, whatever was there. A result larger than the whole
    /// budget is not kept (the key is freed instead: a retry runs again).
    pub(crate) fn complete(&self, key: &Key, owner: ClaimId, done: Claim, ttl: Duration) {
        let mut entries = lock(&self.entries);
        if matches!(&done, Claim::Done { result, .. } if result.len() > self.max_bytes) {
            Self::remove_if_owned(&mut entries, key, owner);
            return;
        }
        self.insert(&mut entries, *key, done, Instant::now(), ttl);
    }

    /// The outcome of a run held under `key` (its result, or that its result was not
    /// kept), if one is, with how long it has left.
    pub(crate) fn outcome(&self, key: &Key) -> Option<(Claim, Duration)> {
        let now = Instant::now();
        let entries = lock(&self.entries);
        let slot = entries.map.get(key).filter(|slot| slot.expires > now)?;
        matches!(slot.entry, Claim::Done { .. } | Claim::Unkept { .. })
            .then(|| (slot.entry.clone(), slot.expires - now))
    }

    /// Frees `key` if `owner` still holds it running (the request ended without a result to
    /// keep, or was dropped).
    pub(crate) fn release(&self, key: &Key, owner: ClaimId) {
        Self::remove_if_owned(&mut lock(&self.entries), key, owner);
    }

    fn remove_if_owned(entries: &mut Entries, key: &Key, owner: ClaimId) {
        let owned = matches!(
            entries.map.get(key),
            Some(Slot { entry: Claim::Running { owner: o, .. }, .. }) if *o == owner
        );
        if owned {
            if let Some(slot) = entries.map.remove(key) {
                entries.bytes -= slot.bytes();
            }
        }
    }

    /// Puts `entry` under `key` until `now + ttl` (`now`: the caller's clock read), then
    /// evicts down to the bounds.
    fn insert(&self, entries: &mut Entries, key: Key, entry: Claim, now: Instant, ttl: Duration) {
        let expires = now + ttl;
        let generation = entries.next_generation;
        entries.next_generation += 1;
        let slot = Slot {
            entry,
            expires,
            generation,
        };
        entries.bytes += slot.bytes();
        if let Some(old) = entries.map.insert(key, slot) {
            entries.bytes -= old.bytes();
        }
        entries.order.push_back((key, generation));
        // The oldest go first, however long they had left: the bounds hold at every insert.
        // A claim still running is never evicted: its retry would run the call a second
        // time, and any client could push out another's by sending keyed calls. Those are
        // bounded without this (a claim is taken by a worker, and workers by the pool);
        // each is passed over once, moved to the back.
        let mut passed_over = 0;
        while entries.map.len() > self.max_entries
            || entries.bytes > self.max_bytes
            || entries.order.len() > 2 * self.max_entries
            || entries.order.front().is_some_and(|(key, generation)| {
                entries
                    .map
                    .get(key)
                    .is_none_or(|slot| slot.generation != *generation || slot.expires <= now)
            })
        {
            if passed_over > entries.order.len() {
                break;
            }
            let Some((oldest, generation)) = entries.order.pop_front() else {
                break;
            };
            let Some(slot) = entries
                .map
                .get(&oldest)
                .filter(|slot| slot.generation == generation)
            else {
                continue;
            };
            if slot.expires > now && matches!(slot.entry, Claim::Running { .. }) {
                entries.order.push_back((oldest, generation));
                passed_over += 1;
                continue;
            }
            if let Some(slot) = entries.map.remove(&oldest) {
                entries.bytes -= slot.bytes();
            }
        }
    }

    /// Entries held (tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.entries).map.len()
    }
}

impl NonceCache {
    /// `max_nonces` in all, shared out evenly between `signers` (at least one each).
    pub(crate) fn new(max_nonces: usize, signers: usize) -> Self {
        Self {
            by_signer: Mutex::default(),
            per_signer: (max_nonces / signers.max(1)).max(1),
        }
    }

    /// Every nonce held and live now, with when it may be forgotten: what Redis is to hold
    /// again after it lost them (it restarted empty).
    pub(crate) fn live(&self) -> Vec<(Key, Instant)> {
        let now = Instant::now();
        lock(&self.by_signer)
            .values()
            .flat_map(|nonces| nonces.map.iter())
            .filter(|(_, expires)| **expires > now)
            .map(|(key, expires)| (*key, *expires))
            .collect()
    }

    /// The nonces each signer may hold at once.
    #[cfg(test)]
    pub(crate) fn per_signer(&self) -> usize {
        self.per_signer
    }

    /// Records a nonce of `signer` for `ttl`, unless it is live already or the signer's
    /// share is full of live ones. `signer` must be a configured one (the map is bounded by
    /// the configuration, not by what clients send).
    pub(crate) fn claim(&self, signer: &str, key: &Key, ttl: Duration) -> Result<(), NonceRefused> {
        let now = Instant::now();
        let mut by_signer = lock(&self.by_signer);
        if !by_signer.contains_key(signer) {
            by_signer.insert(signer.to_owned(), Nonces::default());
        }
        let Some(nonces) = by_signer.get_mut(signer) else {
            return Err(NonceRefused::Full);
        };
        while let Some((oldest, expires)) = nonces.order.front().copied() {
            if expires > now {
                break;
            }
            nonces.order.pop_front();
            // Unless the nonce was taken again since (its entry here is the older one's).
            if nonces.map.get(&oldest) == Some(&expires) {
                nonces.map.remove(&oldest);
            }
        }
        // One that expired behind a longer-lived one (not swept yet) is free again (review
        // 58 #7: it was refused as replayed).
        if nonces.map.get(key).is_some_and(|expires| *expires > now) {
            return Err(NonceRefused::Replayed);
        }
        // Taken again after it expired, it takes its own room: never refused as full
        // (review 59).
        let retaken = nonces.map.contains_key(key);
        if !retaken && nonces.map.len() >= self.per_signer {
            // Full: those that expired behind a longer-lived one go too, before a refusal.
            let Nonces {
                map,
                order,
                swept_at,
            } = nonces;
            if swept_at.is_some_and(|at| now.duration_since(at) < SWEEP_EVERY) {
                return Err(NonceRefused::Full);
            }
            *swept_at = Some(now);
            map.retain(|_, expires| *expires > now);
            order.retain(|(key, expires)| map.get(key) == Some(expires));
            if map.len() >= self.per_signer {
                return Err(NonceRefused::Full);
            }
        }
        nonces.map.insert(*key, now + ttl);
        nonces.order.push_back((*key, now + ttl));
        // A nonce taken again leaves its older entry in the order until that one's turn:
        // bounded to twice the share, each live nonce having one entry that is its own.
        if nonces.order.len() > 2 * self.per_signer {
            let Nonces { map, order, .. } = nonces;
            order.retain(|(key, expires)| map.get(key) == Some(expires));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const FP: [u8; 32] = [7; 32];
    const TTL: Duration = Duration::from_secs(60);

    fn key(n: u8) -> Key {
        [n; 32]
    }

    fn running(owner: ClaimId) -> Claim {
        Claim::Running {
            fingerprint: FP,
            owner,
        }
    }

    fn done(result: &str) -> Claim {
        Claim::Done {
            fingerprint: FP,
            result: Arc::from(result),
        }
    }

    #[test]
    fn the_first_claim_runs_and_later_ones_see_its_entry() {
        let store = MemoryStore::new(10, 1000);
        assert!(store.claim(&key(1), running(1), TTL).is_none());
        assert!(matches!(
            store.claim(&key(1), running(2), TTL),
            Some(Claim::Running { owner: 1, .. })
        ));
        store.complete(&key(1), 1, done("{}"), TTL);
        assert!(matches!(
            store.claim(&key(1), running(2), TTL),
            Some(Claim::Done { ref result, .. }) if &**result == "{}"
        ));
    }

    #[test]
    fn release_frees_only_the_owners_claim() {
        let store = MemoryStore::new(10, 1000);
        assert!(store.claim(&key(1), running(1), TTL).is_none());
        store.release(&key(1), 2);
        assert!(store.claim(&key(1), running(2), TTL).is_some());
        store.release(&key(1), 1);
        assert!(store.claim(&key(1), running(2), TTL).is_none());
    }

    #[test]
    fn a_running_claim_is_never_evicted_however_many_come_after_it() {
        let store = MemoryStore::new(4, 1000);
        assert!(store.claim(&key(1), running(1), TTL).is_none());
        // Anyone's keyed calls, more than the store holds, each run and done.
        for n in 2..20 {
            assert!(store.claim(&key(n), running(u128::from(n)), TTL).is_none());
            store.complete(&key(n), u128::from(n), done("{}"), TTL);
        }
        assert!(
            matches!(
                store.claim(&key(1), running(99), TTL),
                Some(Claim::Running { owner: 1, .. })
            ),
            "the first run's retry must join it, not run again"
        );
        assert_eq!(store.len(), 4, "the bound holds for the rest");
        // Only running claims: the bound is passed rather than one of them evicted.
        for n in 30..40 {
            assert!(store.claim(&key(n), running(u128::from(n)), TTL).is_none());
        }
        assert_eq!(store.len(), 11);
        store.release(&key(1), 1);
        assert!(store.claim(&key(1), running(2), TTL).is_none());
    }

    #[test]
    fn an_expired_entry_is_gone() {
        let store = MemoryStore::new(10, 1000);
        assert!(store.claim(&key(1), running(1), Duration::ZERO).is_none());
        assert!(store.claim(&key(1), running(2), TTL).is_none());
    }

    #[test]
    fn entries_and_bytes_are_bounded_oldest_first() {
        let store = MemoryStore::new(3, 10);
        for n in 0..5 {
            assert!(store.claim(&key(n), running(1), TTL).is_none());
            store.complete(&key(n), 1, done("1"), TTL);
        }
        assert_eq!(store.len(), 3);
        assert!(
            store.claim(&key(0), running(9), TTL).is_none(),
            "the oldest went"
        );
        store.complete(&key(3), 1, done("123456"), TTL);
        store.complete(&key(4), 1, done("123456"), TTL);
        assert!(
            matches!(
                store.claim(&key(4), running(9), TTL),
                Some(Claim::Done { .. })
            ),
            "the newest result stays"
        );
        assert!(
            store.claim(&key(3), running(9), TTL).is_none(),
            "12 bytes are over the budget of 10: the older result went"
        );
        store.complete(&key(5), 1, done("12345678901"), TTL);
        assert!(
            store.claim(&key(5), running(9), TTL).is_none(),
            "a result over the whole budget is not kept"
        );
    }

    #[test]
    fn nonces_are_refused_when_replayed_or_full_and_expire() {
        let cache = NonceCache::new(2, 1);
        assert_eq!(cache.claim("a", &key(1), TTL), Ok(()));
        assert_eq!(cache.claim("a", &key(1), TTL), Err(NonceRefused::Replayed));
        assert_eq!(cache.claim("a", &key(2), TTL), Ok(()));
        assert_eq!(cache.claim("a", &key(3), TTL), Err(NonceRefused::Full));
        let cache = NonceCache::new(1, 1);
        assert_eq!(cache.claim("a", &key(1), Duration::ZERO), Ok(()));
        assert_eq!(
            cache.claim("a", &key(2), TTL),
            Ok(()),
            "the expired one made room"
        );
        assert_eq!(cache.claim("a", &key(1), TTL), Err(NonceRefused::Full));
    }

    #[test]
    fn a_nonce_expired_behind_a_longer_lived_one_may_be_taken_again() {
        let cache = NonceCache::new(4, 1);
        let (short, longer) = (Duration::from_millis(30), Duration::from_millis(150));
        assert_eq!(cache.claim("s", &key(1), longer), Ok(()));
        assert_eq!(cache.claim("s", &key(2), short), Ok(()));
        std::thread::sleep(short * 2);
        assert_eq!(cache.claim("s", &key(2), TTL), Ok(()), "expired: free");
        assert_eq!(
            cache.claim("s", &key(2), TTL),
            Err(NonceRefused::Replayed),
            "taken again: live"
        );
        // The longer-lived one expires: the first entry of the nonce taken again has its
        // turn in the order, and does not let the live one go.
        std::thread::sleep(longer);
        assert_eq!(cache.claim("s", &key(3), TTL), Ok(()));
        assert_eq!(cache.claim("s", &key(2), TTL), Err(NonceRefused::Replayed));
        // Taken again and again, the order stays bounded.
        for _ in 0..20 {
            assert_eq!(cache.claim("s", &key(5), Duration::ZERO), Ok(()));
        }
        let by_signer = lock(&cache.by_signer);
        assert!(by_signer["s"].order.len() <= 2 * cache.per_signer);
    }

    #[test]
    fn a_nonce_expired_behind_a_longer_lived_one_is_taken_again_when_the_share_is_full() {
        let cache = NonceCache::new(2, 1);
        let short = Duration::from_millis(30);
        assert_eq!(cache.claim("s", &key(1), TTL), Ok(()));
        assert_eq!(cache.claim("s", &key(2), short), Ok(()));
        // Full, and swept just now: the next sweep is a second away.
        assert_eq!(cache.claim("s", &key(3), TTL), Err(NonceRefused::Full));
        std::thread::sleep(short * 2);
        assert_eq!(cache.claim("s", &key(2), TTL), Ok(()), "its own room");
        assert_eq!(cache.claim("s", &key(2), TTL), Err(NonceRefused::Replayed));
    }

    #[test]
    fn a_nonce_expired_behind_a_longer_lived_one_makes_room_when_full() {
        let cache = NonceCache::new(3, 1);
        assert_eq!(cache.claim("a", &key(1), TTL), Ok(()));
        assert_eq!(cache.claim("a", &key(2), Duration::ZERO), Ok(()));
        assert_eq!(cache.claim("a", &key(3), Duration::ZERO), Ok(()));
        assert_eq!(
            cache.claim("a", &key(4), TTL),
            Ok(()),
            "the two expired behind the first made room"
        );
        assert_eq!(cache.claim("a", &key(5), TTL), Ok(()));
        assert_eq!(cache.claim("a", &key(6), TTL), Err(NonceRefused::Full));
        assert_eq!(cache.claim("a", &key(1), TTL), Err(NonceRefused::Replayed));
        let mut live: Vec<Key> = cache.live().into_iter().map(|(key, _)| key).collect();
        live.sort();
        assert_eq!(live, vec![key(1), key(4), key(5)]);
        // Swept a moment ago: a full share is refused without a walk for a second.
        let cache = NonceCache::new(2, 1);
        assert_eq!(cache.claim("a", &key(1), TTL), Ok(()));
        assert_eq!(cache.claim("a", &key(2), TTL), Ok(()));
        assert_eq!(cache.claim("a", &key(3), TTL), Err(NonceRefused::Full));
        lock(&cache.by_signer)
            .get_mut("a")
            .expect("a's share")
            .map
            .insert(key(2), Instant::now());
        assert_eq!(
            cache.claim("a", &key(3), TTL),
            Err(NonceRefused::Full),
            "not swept again within a second"
        );
    }

    #[test]
    fn each_signer_has_a_share_of_its_own() {
        let cache = NonceCache::new(4, 2);
        assert_eq!(cache.per_signer(), 2);
        assert_eq!(cache.claim("a", &key(1), TTL), Ok(()));
        assert_eq!(cache.claim("a", &key(2), TTL), Ok(()));
        assert_eq!(cache.claim("a", &key(3), TTL), Err(NonceRefused::Full));
        assert_eq!(cache.claim("b", &key(3), TTL), Ok(()), "b signs on");
        assert_eq!(cache.claim("b", &key(4), TTL), Ok(()));
        assert_eq!(cache.claim("b", &key(5), TTL), Err(NonceRefused::Full));
        assert_eq!(NonceCache::new(1, 3).per_signer(), 1, "at least one each");
    }
}
