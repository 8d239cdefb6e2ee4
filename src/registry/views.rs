//! Views: what one viewer (a session, or for 2026-07-28 requests an identity) sees in place
//! of some of the registry's entries.
//!
//! The gateway registers what a `per_session` upstream offers once, from the child it starts
//! at discovery. A session's own child may offer something else (its tools depend on who the
//! client is, or change while it runs): the gateway then sets a view for that session, owned
//! by the upstream, which hides the upstream's registered entries of a kind and shows the
//! child's instead. Lists, calls, reads, renders and completions of that viewer go through
//! its views; every other viewer sees the registry as it is. A viewer with no view costs a
//! lookup nothing but one atomic load. A key the registry holds and no view hides stays
//! the registry's entry's, for a call as in a list (the first keeps it): a view shows its
//! own entry of a key only in place of one it hides, or of none.
//!
//! A viewer's views are replaced as a whole (copy on write), so a list or a lookup sees one
//! consistent set. Each set keeps the list snapshots it built, per kind, for as long as the
//! registry's entries of that kind do not change.

use super::bus::Viewer;
use super::snapshot::Snapshot;
use super::{Kind, ListKind, Registered, ToolVersions};
use crate::mailbox::inbox::Changes;
use crate::prompt::Prompt;
use crate::resource::{Resource, ResourceTemplate};
use dashmap::DashMap;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Who is looking, borrowed (what a request knows without allocating).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ViewerRef<'a> {
    Session(u64),
    Identity(&'a str),
}

/// One kind of one owner's view: the registry's keys it hides, and the entries it shows.
pub(crate) struct KindView<T> {
    pub hidden: HashSet<String>,
    pub shown: HashMap<String, T>,
}

impl<T: Registered> KindView<T> {
    /// Hides `hidden`, shows `shown`.
    pub(crate) fn new(hidden: HashSet<String>, shown: Vec<T>) -> Arc<Self> {
        let shown = shown.into_iter().map(|t| (t.key().to_owned(), t)).collect();
        Arc::new(Self { hidden, shown })
    }
}

/// What one owner (an upstream) shows one viewer, per kind (`None`: that kind as registered).
#[derive(Default, Clone)]
pub(crate) struct OwnerView {
    pub tools: Option<Arc<KindView<ToolVersions>>>,
    pub resources: Option<Arc<KindView<Resource>>>,
    pub templates: Option<Arc<KindView<ResourceTemplate>>>,
    pub prompts: Option<Arc<KindView<Prompt>>>,
}

impl OwnerView {
    fn is_empty(&self) -> bool {
        self.tools.is_none()
            && self.resources.is_none()
            && self.templates.is_none()
            && self.prompts.is_none()
    }
}

/// How each kind finds its part of an [`OwnerView`].
pub(crate) trait Viewed: Registered {
    fn part(view: &OwnerView) -> Option<&KindView<Self>>;
}

impl Viewed for ToolVersions {
    fn part(view: &OwnerView) -> Option<&KindView<Self>> {
        view.tools.as_deref()
    }
}
impl Viewed for Resource {
    fn part(view: &OwnerView) -> Option<&KindView<Self>> {
        view.resources.as_deref()
    }
}
impl Viewed for ResourceTemplate {
    fn part(view: &OwnerView) -> Option<&KindView<Self>> {
        view.templates.as_deref()
    }
}
impl Viewed for Prompt {
    fn part(view: &OwnerView) -> Option<&KindView<Self>> {
        view.prompts.as_deref()
    }
}

/// Every view of one viewer, by owner (in order: where two show the same key, the first
/// keeps it); never changed once published.
#[derive(Default)]
pub(crate) struct ViewSet {
    owners: BTreeMap<Arc<str>, OwnerView>,
    /// The list snapshots built for this set, per kind.
    snapshots: Mutex<[Option<Built>; 4]>,
}

/// A list snapshot, with the registry's generation of its kind it was built from.
type Built = (u64, Arc<Snapshot>);

/// What a view says of one key.
pub(crate) enum Seen<T> {
    /// A view shows this entry.
    Shown(T),
    /// A view hides the registry's entry.
    Hidden,
    /// No view touches it: the registry's entry, if any.
    AsRegistered,
}

impl ViewSet {
    /// What this set's views say of `key` of kind `T`, as [`items`](Self::items) lists it:
    /// a key the registry holds and no view hides stays the registry's (the first keeps
    /// it); else the entry the first view (by owner) shows, if any. (A call went to any view
    /// showing the key while the list showed the registry's entry: a session's own child
    /// named a tool like a built-in or another upstream's, and took its calls, with their
    /// arguments, for that session; attack run 52c G4.)
    pub(crate) fn seen<T: Viewed>(&self, kind: &Kind<T>, key: &str) -> Seen<T> {
        let mut hidden = false;
        let mut shown = None;
        for view in self.owners.values() {
            if let Some(part) = T::part(view) {
                shown = shown.or_else(|| part.shown.get(key));
                hidden |= part.hidden.contains(key);
            }
        }
        if !hidden && kind.items.contains_key(key) {
            return Seen::AsRegistered;
        }
        match shown {
            Some(entry) => Seen::Shown(entry.clone()),
            None if hidden => Seen::Hidden,
            None => Seen::AsRegistered,
        }
    }

    /// The entries of kind `T` this viewer sees: the registry's enabled entries less those
    /// hidden, and the shown ones but those whose key the registry holds unhidden (e.g. a
    /// local tool's: it stays the registry's, listed or disabled) and those another view
    /// shows first (by owner). Unsorted.
    pub(crate) fn items<T: Viewed>(&self, kind: &Kind<T>) -> Vec<T> {
        let mut hidden: HashSet<&str> = HashSet::new();
        let mut shown: HashMap<&str, &T> = HashMap::new();
        for view in self.owners.values() {
            if let Some(part) = T::part(view) {
                hidden.extend(part.hidden.iter().map(String::as_str));
                for (key, entry) in &part.shown {
                    shown.entry(key.as_str()).or_insert(entry);
                }
            }
        }
        let mut items: Vec<T> = kind
            .items
            .iter()
            .filter(|e| e.enabled && !hidden.contains(e.key().as_str()))
            .map(|e| e.item.clone())
            .collect();
        items.extend(
            shown
                .into_iter()
                .filter(|(key, _)| hidden.contains(key) || !kind.items.contains_key(*key))
                .map(|(_, entry)| entry.clone()),
        );
        items
    }

    /// The list of kind `T` this viewer sees ([`items`](Self::items)), built once per
    /// change of the registry's entries of that kind.
    pub(crate) fn snapshot<T: Viewed>(&self, kind: &Kind<T>) -> Arc<Snapshot> {
        if !self.touches::<T>() {
            return kind.snapshot();
        }
        let slot = list_slot(T::LIST);
        let generation = kind.generation.load(Ordering::Acquire);
        if let Some((built, snapshot)) = &crate::lock(&self.snapshots)[slot] {
            if *built == generation {
                return snapshot.clone();
            }
        }
        let snapshot = Arc::new(Kind::snapshot_of(self.items(kind)));
        crate::lock(&self.snapshots)[slot] = Some((generation, snapshot.clone()));
        snapshot
    }

    /// Whether any view of this set has a part of kind `T`.
    pub(crate) fn touches<T: Viewed>(&self) -> bool {
        self.owners.values().any(|view| T::part(view).is_some())
    }
}

fn list_slot(kind: ListKind) -> usize {
    match kind {
        ListKind::Tools => 0,
        ListKind::Resources => 1,
        ListKind::ResourceTemplates => 2,
        ListKind::Prompts => 3,
    }
}

/// Every viewer's views.
#[derive(Default)]
pub(crate) struct Views {
    by_session: DashMap<u64, Arc<ViewSet>, crate::FastHash>,
    by_identity: DashMap<Arc<str>, Arc<ViewSet>, crate::FastHash>,
    /// Viewers with views: lookups skip the maps while there are none.
    viewers: AtomicUsize,
    /// Bumped with every change of a view, for the sessions' tool caches.
    pub(crate) generation: AtomicU64,
    /// Serializes writers (each replaces a set it read).
    writer: Mutex<()>,
}

impl Views {
    /// The views of `viewer`, if it has any.
    pub(crate) fn of(&self, viewer: ViewerRef<'_>) -> Option<Arc<ViewSet>> {
        if self.viewers.load(Ordering::Acquire) == 0 {
            return None;
        }
        match viewer {
            ViewerRef::Session(id) => self.by_session.get(&id).map(|s| s.clone()),
            ViewerRef::Identity(principal) => self.by_identity.get(principal).map(|s| s.clone()),
        }
    }

    /// Changes what `owner` shows `viewer` with `update` (given the view as it is, empty if
    /// there is none; a view left empty is removed) and returns what `update` says changed.
    pub(crate) fn update(
        &self,
        viewer: &Viewer,
        owner: &str,
        update: impl FnOnce(&mut OwnerView) -> Changes,
    ) -> Changes {
        let _writer = crate::lock(&self.writer);
        let before = self.of_locked(viewer);
        let mut view = before
            .as_ref()
            .and_then(|set| set.owners.get(owner).cloned())
            .unwrap_or_default();
        let had = !view.is_empty();
        let changed = update(&mut view);
        if view.is_empty() && !had {
            return changed;
        }
        let mut owners: BTreeMap<Arc<str>, OwnerView> =
            before.map(|set| set.owners.clone()).unwrap_or_default();
        if view.is_empty() {
            owners.remove(owner);
        } else {
            owners.insert(Arc::from(owner), view);
        }
        let set = (!owners.is_empty()).then(|| {
            Arc::new(ViewSet {
                owners,
                snapshots: Mutex::default(),
            })
        });
        let (added, removed) = match (viewer, set) {
            (Viewer::Session(id), Some(set)) => (self.by_session.insert(*id, set).is_none(), false),
            (Viewer::Session(id), None) => (false, self.by_session.remove(id).is_some()),
            (Viewer::Identity(p), Some(set)) => {
                (self.by_identity.insert(p.clone(), set).is_none(), false)
            }
            (Viewer::Identity(p), None) => (false, self.by_identity.remove(p).is_some()),
        };
        if added {
            self.viewers.fetch_add(1, Ordering::AcqRel);
        }
        if removed {
            self.viewers.fetch_sub(1, Ordering::AcqRel);
        }
        self.generation.fetch_add(1, Ordering::Release);
        changed
    }

    fn of_locked(&self, viewer: &Viewer) -> Option<Arc<ViewSet>> {
        match viewer {
            Viewer::Session(id) => self.by_session.get(id).map(|s| s.clone()),
            Viewer::Identity(p) => self.by_identity.get(p).map(|s| s.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{Registry, VersionChooser};
    use crate::{RequestContext, Tool, ToolError};

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct NoArgs {}

    async fn nothing(_: NoArgs, _: RequestContext) -> Result<String, ToolError> {
        Ok(String::new())
    }

    fn tool(name: &str) -> Tool {
        Tool::new(name, "a tool", nothing)
    }

    struct First;
    impl VersionChooser for First {
        fn choose(&self, _: &str, _: &[Arc<str>]) -> usize {
            0
        }
    }

    fn names(registry: &Registry, viewer: ViewerRef<'_>) -> Vec<String> {
        let page = registry
            .page(
                ListKind::Tools,
                crate::protocol::mcp::ProtocolVersion::NEWEST_SESSION,
                None,
                100,
                None,
                (&First, viewer),
            )
            .expect("a page");
        let tools: Vec<serde_json::Value> =
            serde_json::from_str(&page.items_json).expect("a JSON array");
        tools
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect()
    }

    #[test]
    fn a_view_changes_what_its_viewer_alone_sees_until_it_is_emptied() {
        let registry = Registry::default();
        for name in ["local", "up__a", "up__b"] {
            registry.add_tool(tool(name)).expect("registered");
        }
        let alice = Viewer::Session(1);
        let bob = ViewerRef::Session(2);
        let hidden: HashSet<String> = ["up__a".to_owned(), "up__b".to_owned()].into();
        registry.update_view(&alice, "up", |view| {
            view.tools = Some(Registry::tool_view(
                hidden,
                vec![tool("up__a"), tool("up__c"), tool("local")],
            ));
            Changes::TOOLS
        });
        let seen_by_alice = ViewerRef::Session(1);
        // `local` stays the registry's: a view shows no second entry of a key it does not hide.
        assert_eq!(names(&registry, seen_by_alice), ["local", "up__a", "up__c"]);
        assert_eq!(names(&registry, bob), ["local", "up__a", "up__b"]);
        assert!(registry
            .tool_handler("up__c", &First, seen_by_alice)
            .is_ok());
        assert!(registry
            .tool_handler("up__b", &First, seen_by_alice)
            .is_err());
        assert!(registry.tool_handler("up__c", &First, bob).is_err());
        assert!(registry.tool_handler("up__b", &First, bob).is_ok());
        // The registry changes under the view: the view's list follows.
        registry.add_tool(tool("later")).expect("registered");
        assert_eq!(
            names(&registry, seen_by_alice),
            ["later", "local", "up__a", "up__c"]
        );

        registry.update_view(&alice, "up", |view| {
            *view = OwnerView::default();
            Changes::TOOLS
        });
        assert!(registry.inner.views.of(seen_by_alice).is_none());
        assert_eq!(registry.inner.views.viewers.load(Ordering::Relaxed), 0);
        assert_eq!(
            names(&registry, seen_by_alice),
            ["later", "local", "up__a", "up__b"]
        );
    }

    /// A key a view shows, hiding nothing of it, that the registry comes to hold (a tool
    /// added, another upstream's re-list): the registry's entry keeps it, for a call as in
    /// the list, until a view hides it. (A call went to the view's entry while the list
    /// showed the registry's: attack run 52c G4.)
    #[test]
    fn a_shown_key_the_registry_comes_to_hold_is_the_registrys_for_a_call_too() {
        let registry = Registry::default();
        let me = ViewerRef::Session(1);
        let other = ViewerRef::Session(2);
        registry.update_view(&Viewer::Session(1), "up", |view| {
            view.tools = Some(Registry::tool_view(HashSet::new(), vec![tool("x")]));
            Changes::TOOLS
        });
        let (viewed, _) = registry.tool_handler("x", &First, me).expect("the view's");
        registry.add_tool(tool("x")).expect("registered");
        let (registered, _) = registry.tool_handler("x", &First, other).expect("x");
        let (called, _) = registry.tool_handler("x", &First, me).expect("x");
        assert!(
            Arc::ptr_eq(&called, &registered),
            "the call went to the view's"
        );
        assert!(!Arc::ptr_eq(&called, &viewed));
        assert_eq!(names(&registry, me), ["x"]);

        // Hidden by a view (its own owner's, say): the view's again.
        registry.update_view(&Viewer::Session(1), "up", |view| {
            view.tools = Some(Registry::tool_view(
                ["x".to_owned()].into(),
                vec![tool("x")],
            ));
            Changes::TOOLS
        });
        let (called, _) = registry.tool_handler("x", &First, me).expect("x");
        assert!(!Arc::ptr_eq(&called, &registered));
        assert_eq!(names(&registry, me), ["x"]);
    }

    #[test]
    fn a_tool_cache_forgets_what_a_view_changed() {
        let registry = Registry::default();
        registry.add_tool(tool("up__a")).expect("registered");
        let cache = crate::registry::ToolCache::default();
        let me = ViewerRef::Session(7);
        assert!(registry
            .cached_tool_handler("up__a", &First, me, &cache)
            .is_ok());
        registry.update_view(&Viewer::Session(7), "up", |view| {
            view.tools = Some(Registry::tool_view(["up__a".to_owned()].into(), Vec::new()));
            Changes::TOOLS
        });
        assert!(registry
            .cached_tool_handler("up__a", &First, me, &cache)
            .is_err());
    }
}
