//! The requests a session finished, by id: a `tools/call` whose id is sent again in the same
//! session (a retry after a timeout, or after a resume on a new socket) gets the same
//! response instead of running again; one that reuses the id with other params is refused.
//!
//! It belongs to the session core, so a session that moves to another host (its socket
//! dropped, it waits for a resume) keeps it. It is bounded by `dedup.session_max_entries`,
//! `dedup.session_max_bytes` and `dedup.window_ms`, oldest first, and touched only by its
//! session, so it needs no lock. A session that sends no id twice pays a lookup in an empty
//! or small map per request, and a copy of each `tools/call` result.

use crate::config::DedupSettings;
use crate::protocol::jsonrpc::{result_of, Params, Request, RequestId};
use crate::protocol::mcp::{CallToolParams, ConflictScope, Error};
use serde_json::value::RawValue;
use std::collections::{hash_map, HashMap, VecDeque};
use std::hash::BuildHasher;
use std::time::{Duration, Instant};

use crate::FastHash;

/// See the module docs.
pub struct RecentResponses {
    enabled: bool,
    window: Duration,
    max_entries: usize,
    max_bytes: usize,
    /// Bounded by `max_entries`, filled only by the session's own finished requests.
    map: HashMap<RequestId, Remembered, FastHash>,
    /// Ids in the order they finished (which is the order they expire in).
    order: VecDeque<(RequestId, Instant)>,
    bytes: usize,
    /// Hashes a request's name and arguments; only compared within this session.
    hasher: FastHash,
}

struct Remembered {
    fingerprint: u64,
    result: Box<str>,
    at: Instant,
}

/// What a request is, for comparing it with a later one of the same id.
pub type RequestHash = u64;

impl RecentResponses {
    /// An empty store with the settings' bounds (none is kept when de-duplication is off).
    pub fn new(settings: &DedupSettings) -> Self {
        Self {
            enabled: settings.enabled,
            window: Duration::from_millis(settings.window_ms),
            max_entries: settings.session_max_entries,
            max_bytes: settings.session_max_bytes,
            map: HashMap::default(),
            order: VecDeque::new(),
            bytes: 0,
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
        if self.map.is_empty() {
            return None;
        }
        let remembered = self.map.get(&request.id)?;
        if remembered.at.elapsed() >= self.window {
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

    /// Remembers the response `frame` of the request `id`, finished `now`.
    pub fn remember(&mut self, id: RequestId, fingerprint: RequestHash, frame: &str, now: Instant) {
        let Some(result) = result_of(frame, &id) else {
            return;
        };
        if result.len() > self.max_bytes {
            return;
        }
        let remembered = Remembered {
            fingerprint,
            result: result.into(),
            at: now,
        };
        self.bytes += remembered.result.len();
        if let Some(old) = self.map.insert(id.clone(), remembered) {
            self.bytes -= old.result.len();
        }
        self.order.push_back((id, now));
        while self.map.len() > self.max_entries
            || self.bytes > self.max_bytes
            || self
                .order
                .front()
                .is_some_and(|(_, at)| now.duration_since(*at) >= self.window)
        {
            let Some((oldest, at)) = self.order.pop_front() else {
                break;
            };
            // An id remembered again since is the newer entry's to keep.
            if let hash_map::Entry::Occupied(entry) = self.map.entry(oldest) {
                if entry.get().at == at {
                    self.bytes -= entry.remove().result.len();
                }
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

    fn finish(recent: &mut RecentResponses, id: u32, text: &str) {
        let fingerprint = with_request(&call(id, text), |r| match &r.params {
            Params::Parsed(p) => recent.fingerprint(&p.name, p.arguments),
            Params::Raw(_) => None,
        })
        .expect("on");
        let frame = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":"{text}"}}"#);
        let request_id = with_request(&call(id, text), |r| r.id.clone());
        recent.remember(request_id, fingerprint, &frame, Instant::now());
    }

    #[test]
    fn a_finished_id_gets_its_result_again_and_other_params_a_conflict() {
        let mut recent = RecentResponses::new(&settings(8, 1000));
        assert!(with_request(&call(1, "a"), |r| recent.replay(r)).is_none());
        finish(&mut recent, 1, "a");
        assert_eq!(
            with_request(&call(1, "a"), |r| recent.replay(r)),
            Some(Ok(r#""a""#.to_owned()))
        );
        assert!(matches!(
            with_request(&call(1, "b"), |r| recent.replay(r)),
            Some(Err(Error::IdempotencyConflict { .. }))
        ));
        assert!(with_request(&call(2, "a"), |r| recent.replay(r)).is_none());
    }

    #[test]
    fn bounded_by_entries_and_bytes_oldest_first() {
        let mut recent = RecentResponses::new(&settings(2, 1000));
        for id in 1..=3 {
            finish(&mut recent, id, "x");
        }
        assert!(with_request(&call(1, "x"), |r| recent.replay(r)).is_none());
        assert!(with_request(&call(3, "x"), |r| recent.replay(r)).is_some());
        let mut recent = RecentResponses::new(&settings(8, 8));
        finish(&mut recent, 1, "abcd");
        finish(&mut recent, 2, "abcd");
        assert!(with_request(&call(1, "abcd"), |r| recent.replay(r)).is_none());
        assert!(with_request(&call(2, "abcd"), |r| recent.replay(r)).is_some());
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
