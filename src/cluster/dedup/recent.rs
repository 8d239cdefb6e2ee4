//! The requests a session finished, by id: a `tools/call` whose id is sent again in the same
//! session (a retry after a timeout, or after a resume on a new socket) gets the same
//! response instead of running again; one that reuses the id with other params is refused.
//!
//! It belongs to the session core, so a session that moves to another host on its node (its
//! socket dropped, it waits for a resume) keeps it; a session taken up by another node does not
//! (its record carries no answers): there a finished id runs again, so calls that must not run
//! twice carry an idempotency key (`cluster::dedup`, kept in Redis). It is bounded by
//! `dedup.session_max_entries`, `dedup.session_max_bytes` and `dedup.window_ms`, oldest first,
//! and touched only by its session, so it needs no lock. A session that sends no id twice pays
//! a lookup in an empty or small map per request, and a copy of each `tools/call` result.

use crate::config::DedupSettings;
use crate::protocol::jsonrpc::{result_of, Params, Request, RequestId};
use crate::protocol::mcp::{CallToolParams, ConflictScope, Error};
use hashbrown::hash_table::{Entry, HashTable};
use serde_json::value::RawValue;
use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::time::{Duration, Instant};

use crate::FastHash;

/// See the module docs.
pub struct RecentResponses {
    enabled: bool,
    /// What is remembered, from the first answer on: a session that is never answered a
    /// `tools/call` keeps a pointer, not the table (it is held inline by every session).
    stored: Option<Box<Stored>>,
    /// Hashes ids, and a request's name and arguments; only compared within this session.
    hasher: FastHash,
}

/// The remembered answers, made with the first.
#[derive(Default)]
struct Stored {
    /// Bounded by `dedup.session_max_entries`, filled only by the session's own finished
    /// requests. A table that is given each id's hash: the hash is computed once per request
    /// remembered and kept for its eviction, where a map hashed the id again to insert and to
    /// evict (callgrind: `remember` went from 783 to 645 instructions per request).
    table: HashTable<Remembered>,
    /// Ids in the order they finished (which is the order they expire in), with their hash,
    /// when they finished and their entry's expiry.
    order: VecDeque<(RequestId, u64, Instant, Expiry)>,
    bytes: usize,
}

struct Remembered {
    id: RequestId,
    /// The id's hash, for the table to move the entry when it grows.
    hash: u64,
    fingerprint: u64,
    result: Box<str>,
    /// When it finished: which of the `order` entries of its id is its own.
    at: Instant,
    /// When it stops being replayed; the clock read once when it was remembered (an
    /// `Instant` difference per check cost more than a comparison).
    expires: Expiry,
}

/// When a remembered answer expires: `None` for a window too long to add to the clock.
type Expiry = Option<Instant>;

fn expired(expires: Expiry, now: Instant) -> bool {
    expires.is_some_and(|at| now >= at)
}

/// What a request is, for comparing it with a later one of the same id.
pub type RequestHash = u64;

impl RecentResponses {
    /// An empty store with the settings' bounds (none is kept when de-duplication is off).
    pub fn new(settings: &DedupSettings) -> Self {
        Self {
            enabled: settings.enabled,
            stored: None,
            hasher: FastHash::default(),
        }
    }

    /// A store that keeps nothing (a session of one request, which no retry can reach).
    pub fn disabled() -> Self {
        Self::new(&DedupSettings {
            enabled: false,
            ..DedupSettings::default()
        })
    }

    /// The fingerprint of a `tools/call` to remember once it finishes; `None` when
    /// de-duplication is off.
    pub fn fingerprint(&self, name: &str, arguments: Option<&RawValue>) -> Option<RequestHash> {
        self.enabled
            .then(|| self.hasher.hash_one((name, arguments.map(RawValue::get))))
    }

    /// The answer to `request` if its id is one this session finished within the window:
    /// the stored result (JSON) when it asks the same again, else a conflict.
    pub fn replay(
        &self,
        request: &Request<'_, CallToolParams<'_>>,
    ) -> Option<Result<String, Error>> {
        let stored = self.stored.as_ref().filter(|s| !s.table.is_empty())?;
        let hash = self.hasher.hash_one(&request.id);
        let remembered = stored.table.find(hash, |e| e.id == request.id)?;
        if expired(remembered.expires, Instant::now()) {
            return None;
        }
        let same = crate::protocol::mcp::Method::parse(&request.method)
            == Some(crate::protocol::mcp::Method::ToolsCall)
            && match &request.params {
                Params::Parsed(p) => self.fingerprint(&p.name, p.arguments),
                Params::Raw(raw) => crate::protocol::mcp::parse_object::<CallToolParams<'_>>(*raw)
                    .ok()
                    .and_then(|p| self.fingerprint(&p.name, p.arguments)),
            } == Some(remembered.fingerprint);
        Some(if same {
            Ok(remembered.result.to_string())
        } else {
            Err(Error::IdempotencyConflict {
                scope: ConflictScope::RequestId,
            })
        })
    }

    /// Remembers the response `frame` of the request `id`, finished `now`, within the
    /// bounds of `settings` (the ones the store was made with: passed in rather than kept,
    /// as every session holds a store inline, most of them empty).
    pub fn remember(
        &mut self,
        settings: &DedupSettings,
        id: RequestId,
        fingerprint: RequestHash,
        frame: &str,
        now: Instant,
    ) {
        let Some(result) = result_of(frame, &id) else {
            return;
        };
        if result.len() > settings.session_max_bytes {
            return;
        }
        let hash = self.hasher.hash_one(&id);
        let expires = now.checked_add(Duration::from_millis(settings.window_ms));
        // The result is copied (one allocation per remembered answer): the frame itself goes
        // to the socket, and a retry of `id` within the window gets this copy.
        let remembered = Remembered {
            id: id.clone(),
            hash,
            fingerprint,
            result: result.into(),
            at: now,
            expires,
        };
        let stored = self.stored.get_or_insert_with(Box::default);
        stored.bytes += remembered.result.len();
        match stored.table.entry(hash, |e| e.id == id, |e| e.hash) {
            Entry::Occupied(mut entry) => {
                let old = std::mem::replace(entry.get_mut(), remembered);
                stored.bytes -= old.result.len();
            }
            Entry::Vacant(entry) => {
                entry.insert(remembered);
            }
        }
        stored.order.push_back((id, hash, now, expires));
        while stored.table.len() > settings.session_max_entries
            || stored.bytes > settings.session_max_bytes
            || stored
                .order
                .front()
                .is_some_and(|(_, _, _, expires)| expired(*expires, now))
        {
            let Some((oldest, hash, at, _)) = stored.order.pop_front() else {
                break;
            };
            // An id remembered again since is the newer entry's to keep.
            if let Ok(entry) = stored
                .table
                .find_entry(hash, |e| e.id == oldest && e.at == at)
            {
                stored.bytes -= entry.remove().0.result.len();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::jsonrpc::{decode, Decoded, Entry, FrameLimits};

    fn settings(entries: usize, bytes: usize) -> DedupSettings {
        DedupSettings {
            session_max_entries: entries,
            session_max_bytes: bytes,
            ..DedupSettings::default()
        }
    }

    fn with_request<T>(frame: &str, f: impl FnOnce(&Request<'_, CallToolParams<'_>>) -> T) -> T {
        match decode::<CallToolParams<'_>>(frame, &FrameLimits::new(10)) {
            Decoded::Single(Entry::Request(request)) => f(&request),
            other => panic!("{other:?}"),
        }
    }

    fn call(id: u32, text: &str) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"{text}"}}}}}}"#
        )
    }

    /// A store with `settings`, and them for its `remember`.
    struct Store {
        recent: RecentResponses,
        settings: DedupSettings,
    }

    impl Store {
        fn new(settings: DedupSettings) -> Self {
            Self {
                recent: RecentResponses::new(&settings),
                settings,
            }
        }
    }

    /// Remembers the answer `text` to call `id`, finished `at`.
    fn finish_at(store: &mut Store, id: u32, text: &str, at: Instant) {
        let recent = &mut store.recent;
        let fingerprint = with_request(&call(id, text), |r| match &r.params {
            Params::Parsed(p) => recent.fingerprint(&p.name, p.arguments),
            Params::Raw(_) => None,
        })
        .expect("on");
        let frame = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":"{text}"}}"#);
        let request_id = with_request(&call(id, text), |r| r.id.clone());
        recent.remember(&store.settings, request_id, fingerprint, &frame, at);
    }

    fn finish(store: &mut Store, id: u32, text: &str) {
        finish_at(store, id, text, Instant::now());
    }

    #[test]
    fn a_finished_id_gets_its_result_again_and_other_params_a_conflict() {
        let mut store = Store::new(settings(8, 1000));
        assert!(with_request(&call(1, "a"), |r| store.recent.replay(r)).is_none());
        finish(&mut store, 1, "a");
        assert_eq!(
            with_request(&call(1, "a"), |r| store.recent.replay(r)),
            Some(Ok(r#""a""#.to_owned()))
        );
        assert!(matches!(
            with_request(&call(1, "b"), |r| store.recent.replay(r)),
            Some(Err(Error::IdempotencyConflict { .. }))
        ));
        assert!(with_request(&call(2, "a"), |r| store.recent.replay(r)).is_none());
    }

    #[test]
    fn bounded_by_entries_and_bytes_oldest_first() {
        let mut store = Store::new(settings(2, 1000));
        for id in 1..=3 {
            finish(&mut store, id, "x");
        }
        assert!(with_request(&call(1, "x"), |r| store.recent.replay(r)).is_none());
        assert!(with_request(&call(3, "x"), |r| store.recent.replay(r)).is_some());
        let mut store = Store::new(settings(8, 8));
        finish(&mut store, 1, "abcd");
        finish(&mut store, 2, "abcd");
        assert!(with_request(&call(1, "abcd"), |r| store.recent.replay(r)).is_none());
        assert!(with_request(&call(2, "abcd"), |r| store.recent.replay(r)).is_some());
    }

    #[test]
    fn an_id_remembered_again_outlives_its_first_expiry() {
        let mut store = Store::new(DedupSettings {
            window_ms: 60_000,
            ..settings(8, 1000)
        });
        let start = Instant::now();
        finish_at(&mut store, 1, "a", start);
        finish_at(&mut store, 1, "b", start + Duration::from_secs(40));
        // The first answer of id 1 expires here; the second is 30 s from its own expiry.
        finish_at(&mut store, 2, "c", start + Duration::from_secs(70));
        assert_eq!(
            with_request(&call(1, "b"), |r| store.recent.replay(r)),
            Some(Ok(r#""b""#.to_owned()))
        );
        assert_eq!(
            with_request(&call(2, "c"), |r| store.recent.replay(r)),
            Some(Ok(r#""c""#.to_owned()))
        );
    }

    #[test]
    fn nothing_is_kept_when_off() {
        let recent = RecentResponses::new(&DedupSettings {
            enabled: false,
            ..DedupSettings::default()
        });
        assert_eq!(recent.fingerprint("echo", None), None);
    }
}
