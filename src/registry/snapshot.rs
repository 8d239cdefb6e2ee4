//! A list snapshot: one kind's enabled entries in key order, each encoded once per protocol
//! version on first use, and the pages cut from them. An entry registered in several
//! versions (a tool) is encoded in each; a page shows the one the session's chooser picks,
//! so entries (and cursor offsets) are the same for every session. A page is cut from all
//! entries or from those a client may see: a cursor is a position in the whole list, so a
//! filtered page goes on where the last one stopped, and every client pages through exactly
//! what it may see.

use super::VersionChooser;
use crate::protocol::mcp::{Error, ProtocolVersion};
use base64::Engine;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, OnceLock};

/// Encodes one version (`variant`, 0 for kinds without versions) of an entry for a protocol
/// version.
pub(crate) type Encoder = Box<dyn Fn(usize, ProtocolVersion) -> String + Send + Sync>;

/// One entry of a list.
pub(crate) struct Listed {
    /// The name (or URI) the chooser is asked about.
    pub key: Arc<str>,
    /// The versions registered, lowest first (empty or one: nothing to choose).
    pub versions: Arc<[Arc<str>]>,
    pub encode: Encoder,
}

impl Listed {
    fn variants(&self) -> usize {
        self.versions.len().max(1)
    }
}

/// See the module docs.
#[derive(Default)]
pub(crate) struct Snapshot {
    entries: Vec<Listed>,
    /// Where each entry's first variant is in an encoded list.
    starts: Vec<usize>,
    /// Every variant of every entry, in order, encoded per version (index: position in
    /// `ProtocolVersion::ALL`).
    encoded: [OnceLock<Vec<String>>; ProtocolVersion::ALL.len()],
    /// Identifies the content, for cursors: equal on every node with the same entries.
    hash: u64,
}

/// One page of a list: the JSON array of its entries and the cursor of the next page.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    /// The entries, as a JSON array.
    pub items_json: String,
    /// The cursor of the next page, when there is one.
    pub next_cursor: Option<String>,
}

impl Page {
    /// The list result: `{"<member>": [...], "nextCursor"?: "..."}`.
    pub fn to_result(&self, member: &str) -> String {
        let mut out = String::with_capacity(self.items_json.len() + member.len() + 64);
        out.push_str("{\"");
        out.push_str(member);
        out.push_str("\":");
        out.push_str(&self.items_json);
        if let Some(cursor) = &self.next_cursor {
            out.push_str(",\"nextCursor\":\"");
            out.push_str(cursor);
            out.push('"');
        }
        out.push('}');
        out
    }
}

impl Snapshot {
    pub(crate) fn new(entries: impl Iterator<Item = Listed>) -> Self {
        let entries: Vec<Listed> = entries.collect();
        let mut starts = Vec::with_capacity(entries.len());
        // A cursor is a position: what it depends on is which entries there are, in order
        // (their keys and versions), not what each says. A definition that changes in place
        // (a served file's new size, which is no list change) leaves the cursors issued
        // valid: a client paging a directory of growing files could never finish otherwise.
        let mut hasher = std::hash::DefaultHasher::new();
        let mut next = 0;
        for entry in &entries {
            starts.push(next);
            next += entry.variants();
            entry.key.hash(&mut hasher);
            entry.versions.hash(&mut hasher);
        }
        Self {
            entries,
            starts,
            encoded: Default::default(),
            hash: hasher.finish(),
        }
    }

    fn encoded(&self, version: ProtocolVersion) -> &[String] {
        let index = ProtocolVersion::ALL
            .iter()
            .position(|v| *v == version)
            .unwrap_or(0);
        self.encoded[index].get_or_init(|| {
            self.entries
                .iter()
                .flat_map(|e| (0..e.variants()).map(move |variant| (e.encode)(variant, version)))
                .collect()
        })
    }

    /// The page starting at `cursor` (the first page without one), of the entries whose key
    /// `visible` admits (all of them without a filter), showing of each entry the version
    /// `chooser` picks.
    pub(crate) fn page(
        &self,
        version: ProtocolVersion,
        cursor: Option<&str>,
        page_size: usize,
        visible: Option<&dyn Fn(&str) -> bool>,
        chooser: &dyn VersionChooser,
    ) -> Result<Page, Error> {
        let start = match cursor {
            None => 0,
            Some(cursor) => self.decode_cursor(cursor)?,
        };
        let encoded = self.encoded(version);
        let count = self.entries.len();
        let shown = |i: usize| visible.is_none_or(|visible| visible(&self.entries[i].key));
        let mut chosen: Vec<&str> = Vec::with_capacity(page_size.max(1).min(count - start));
        let mut end = start;
        while end < count && chosen.len() < page_size.max(1) {
            if shown(end) {
                let entry = &self.entries[end];
                let variant = match entry.variants() {
                    1 => 0,
                    n => chooser.choose(&entry.key, &entry.versions).min(n - 1),
                };
                chosen.push(encoded[self.starts[end] + variant].as_str());
            }
            end += 1;
        }
        // The next page starts at the next entry shown, if there is one.
        while end < count && !shown(end) {
            end += 1;
        }
        let mut items_json =
            String::with_capacity(chosen.iter().map(|e| e.len() + 1).sum::<usize>() + 2);
        items_json.push('[');
        for (i, entry) in chosen.iter().enumerate() {
            if i > 0 {
                items_json.push(',');
            }
            items_json.push_str(entry);
        }
        items_json.push(']');
        let next_cursor = (end < self.entries.len()).then(|| self.cursor(end));
        Ok(Page {
            items_json,
            next_cursor,
        })
    }

    fn cursor(&self, offset: usize) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(format!("{:016x}:{offset}", self.hash))
    }

    fn decode_cursor(&self, cursor: &str) -> Result<usize, Error> {
        let bad = || Error::InvalidParams("cursor: not a cursor this server issued".into());
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(cursor)
            .map_err(|_| bad())?;
        let text = std::str::from_utf8(&bytes).map_err(|_| bad())?;
        let (hash, offset) = text.split_once(':').ok_or_else(bad)?;
        let hash = u64::from_str_radix(hash, 16).map_err(|_| bad())?;
        let offset: usize = offset.parse().map_err(|_| bad())?;
        if hash != self.hash {
            return Err(Error::InvalidParams(
                "cursor: the list changed since this cursor was issued; list again from the start"
                    .into(),
            ));
        }
        if offset == 0 || offset >= self.entries.len() {
            return Err(bad());
        }
        Ok(offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(names: &[&'static str]) -> Snapshot {
        Snapshot::new(names.iter().map(|&name| Listed {
            key: name.into(),
            versions: Arc::from(Vec::new()),
            encode: Box::new(move |_, _| format!("\"{name}\"")),
        }))
    }

    /// Picks the lowest version of every entry.
    struct Lowest;

    impl VersionChooser for Lowest {
        fn choose(&self, _tool: &str, _versions: &[Arc<str>]) -> usize {
            0
        }
    }

    /// Picks the highest version of every entry.
    struct Highest;

    impl VersionChooser for Highest {
        fn choose(&self, _tool: &str, versions: &[Arc<str>]) -> usize {
            versions.len() - 1
        }
    }

    #[test]
    fn an_entry_in_several_versions_shows_the_chosen_one_in_its_place() {
        let versions: Arc<[Arc<str>]> = Arc::from(vec![Arc::from("1"), Arc::from("2")]);
        let s = Snapshot::new(
            [
                Listed {
                    key: "a".into(),
                    versions: Arc::from(Vec::new()),
                    encode: Box::new(|_, _| "\"a\"".into()),
                },
                Listed {
                    key: "b".into(),
                    versions,
                    encode: Box::new(|variant, _| format!("\"b{}\"", variant + 1)),
                },
                Listed {
                    key: "c".into(),
                    versions: Arc::from(Vec::new()),
                    encode: Box::new(|_, _| "\"c\"".into()),
                },
            ]
            .into_iter(),
        );
        let v = ProtocolVersion::NEWEST_SESSION;
        let lowest = s.page(v, None, 10, None, &Lowest).expect("page");
        assert_eq!(lowest.items_json, r#"["a","b1","c"]"#);
        let highest = s.page(v, None, 10, None, &Highest).expect("page");
        assert_eq!(highest.items_json, r#"["a","b2","c"]"#);
        // Pages count entries, not versions: the same cursors for every session.
        let first = s.page(v, None, 2, None, &Highest).expect("first");
        assert_eq!(first.items_json, r#"["a","b2"]"#);
        let next = s
            .page(v, first.next_cursor.as_deref(), 2, None, &Lowest)
            .expect("next");
        assert_eq!(next.items_json, r#"["c"]"#);
    }

    #[test]
    fn pages_follow_each_other_and_end() {
        let s = snapshot(&["a", "b", "c", "d", "e"]);
        let v = ProtocolVersion::NEWEST_SESSION;
        let first = s.page(v, None, 2, None, &Highest).expect("first");
        assert_eq!(first.items_json, r#"["a","b"]"#);
        let second = s
            .page(v, first.next_cursor.as_deref(), 2, None, &Highest)
            .expect("second");
        assert_eq!(second.items_json, r#"["c","d"]"#);
        let last = s
            .page(v, second.next_cursor.as_deref(), 2, None, &Highest)
            .expect("last");
        assert_eq!(last.items_json, r#"["e"]"#);
        assert_eq!(last.next_cursor, None);
        assert_eq!(last.to_result("tools"), r#"{"tools":["e"]}"#);
    }

    #[test]
    fn bad_and_stale_cursors_are_refused() {
        let old = snapshot(&["a", "b", "c"]);
        let cursor = old
            .page(ProtocolVersion::NEWEST_SESSION, None, 1, None, &Highest)
            .expect("page")
            .next_cursor
            .expect("more");
        let new = snapshot(&["a", "b", "x"]);
        let stale = new
            .page(
                ProtocolVersion::NEWEST_SESSION,
                Some(&cursor),
                1,
                None,
                &Highest,
            )
            .expect_err("a stale cursor is refused");
        assert!(stale.to_string().contains("changed"), "{stale}");
        for bad in ["", "!!", "bm90IGEgY3Vyc29y", &cursor[..cursor.len() - 2]] {
            assert!(
                old.page(
                    ProtocolVersion::NEWEST_SESSION,
                    Some(bad),
                    1,
                    None,
                    &Highest
                )
                .is_err(),
                "{bad}"
            );
        }
    }
    #[test]
    fn filtered_pages_hold_only_what_is_visible_and_end_with_it() {
        let s = snapshot(&["a", "b", "c", "d", "e", "f", "g"]);
        let v = ProtocolVersion::NEWEST_SESSION;
        let vowels_and_d = |key: &str| matches!(key, "a" | "d" | "e");
        let visible: Option<&dyn Fn(&str) -> bool> = Some(&vowels_and_d);
        let first = s.page(v, None, 2, visible, &Highest).expect("first");
        assert_eq!(first.items_json, r#"["a","d"]"#);
        let second = s
            .page(v, first.next_cursor.as_deref(), 2, visible, &Highest)
            .expect("second");
        assert_eq!(second.items_json, r#"["e"]"#);
        assert_eq!(second.next_cursor, None, "nothing visible is left after e");
        let nothing = |_: &str| false;
        let empty = s.page(v, None, 2, Some(&nothing), &Highest).expect("empty");
        assert_eq!((empty.items_json.as_str(), empty.next_cursor), ("[]", None));
    }
}
