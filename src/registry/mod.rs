//! What the server offers, changeable while sessions are live: tools, resources, resource
//! templates and prompts, each by its key (name, URI or URI template), each enabled or
//! disabled.
//!
//! Lookups (a call, a read, a render) go through a `DashMap` per kind. Lists are served from a
//! snapshot per kind, rebuilt by the writer when it changes something, so a `*/list` never
//! waits on a writer and its pages stay consistent: a snapshot is sorted by key
//! (deterministic order) and its entries are encoded once per protocol version, on first use.
//! Every change is published on the [`ChangeBus`], which tells the sessions.
//!
//! A tool may be registered in several versions ([`Tool::version`]): its entry holds them
//! all, lowest first, and a [`VersionChooser`] (the session's rollout) picks the one a list
//! shows and a call runs. A tool registered once costs a call nothing more.
//!
//! Each kind counts its changes (its generation, bumped with every snapshot rebuild, which
//! every change ends in). A session keeps the tools it called in a [`ToolCache`] while the
//! count stands still, instead of taking a shard lock of the map per call.
//!
//! A viewer (a session, or a 2026-07-28 identity) may have views (`views`): entries of one
//! owner (a gateway upstream) it sees in place of the registered ones. Lists and lookups of
//! a viewer without views cost one atomic load more.
//!
//! Pagination cursors are opaque: a hash of the list's entries (their keys and versions, in
//! order) and an offset, base64url. A cursor that does not decode, or whose list has gained
//! or lost entries since (another hash), is refused with -32602, never silently restarted
//! from the first page; a definition changed in place (a served file's new size) leaves it
//! valid. The hash covers only the entries, so any node serving the same registry accepts
//! the same cursors.

pub mod bus;
pub mod files;
pub mod rollout;
mod snapshot;
mod views;

use crate::mailbox::inbox::Changes;
use crate::prompt::Prompt;
use crate::protocol::mcp::{Error, HeaderParam, Offers, ProtocolVersion};
use crate::registry::bus::{BusEvent, ChangeBus};

use crate::resource::{Resource, ResourceTemplate, TemplateVariables};
use crate::tool::{Tool, ToolHandler};
use dashmap::DashMap;
use snapshot::Snapshot;
use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

pub use bus::Viewer;
pub use snapshot::Page;
pub(crate) use views::{KindView, OwnerView, ViewerRef};
use views::{Seen, ViewSet, Viewed};

use crate::{lock, FastHash};

/// Why a registration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// Something of this kind is already registered under this key.
    #[error("a {kind} named {key:?} is already registered")]
    Duplicate {
        /// `tool`, `resource`, `resource template` or `prompt`.
        kind: &'static str,
        /// The taken name, URI or template.
        key: String,
    },
    /// A tool of this name is already registered in this version.
    #[error("a tool named {name:?} is already registered in version {version:?}")]
    DuplicateVersion {
        /// The tool's name.
        name: String,
        /// The taken version.
        version: String,
    },
    /// A resource template this server cannot match URIs against: not an RFC 6570 level-1
    /// template, empty, or naming a variable twice (valid RFC 6570, but a URI would give
    /// that variable two values).
    #[error("invalid resource template: {0}")]
    InvalidTemplate(String),
    /// A tool or prompt whose name, or a prompt's arguments, clients cannot use: an empty
    /// name, one over 128 characters (the spec's bound for tool names, kept for prompts
    /// too) or with a control character, a prompt argument named twice.
    #[error("{kind} {name:?}: {reason}")]
    Invalid {
        /// `tool` or `prompt`.
        kind: &'static str,
        /// Its name (its first 64 characters).
        name: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A tool whose `inputSchema` or `outputSchema` does not describe a JSON object
    /// (`"type": "object"`), as MCP requires of both: `structuredContent` is an object, and
    /// clients refuse a whole `tools/list` holding another kind of schema.
    #[error("the {member} of tool {tool:?} must describe an object (\"type\": \"object\"); wrap the value in a struct")]
    InvalidToolSchema {
        /// The tool's name.
        tool: String,
        /// `inputSchema` or `outputSchema`.
        member: &'static str,
    },
    /// A tool whose `inputSchema` has an invalid `x-mcp-header` annotation (clients drop
    /// such a tool).
    #[error("tool {tool:?}: {reason}")]
    InvalidHeaderAnnotation {
        /// The tool's name.
        tool: String,
        /// What is wrong.
        reason: String,
    },
}

/// The kinds of things registered, for lists and changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    /// `tools/list`.
    Tools,
    /// `resources/list`.
    Resources,
    /// `resources/templates/list`.
    ResourceTemplates,
    /// `prompts/list`.
    Prompts,
}

impl ListKind {
    /// The member of the list result that holds the entries.
    pub(crate) fn member(self) -> &'static str {
        match self {
            Self::Tools => "tools",
            Self::Resources => "resources",
            Self::ResourceTemplates => "resourceTemplates",
            Self::Prompts => "prompts",
        }
    }

    fn change(self) -> Changes {
        match self {
            Self::Tools => Changes::TOOLS,
            Self::Resources | Self::ResourceTemplates => Changes::RESOURCES,
            Self::Prompts => Changes::PROMPTS,
        }
    }
}

/// Something registered, with what lists say of it.
pub(crate) trait Registered: Clone + Send + Sync + 'static {
    const KIND: &'static str;
    const LIST: ListKind;
    fn key(&self) -> &str;
    /// The versions this entry holds, lowest first; empty for kinds without versions.
    fn versions(&self) -> &Arc<[Arc<str>]>;
    /// The definition of the version at `variant` (0 for kinds without versions).
    fn serialize_definition(&self, variant: usize, version: ProtocolVersion) -> String;
    /// Adds `other` (of the same key) to this entry: refused for kinds without versions and
    /// for a version already held.
    fn merge(&mut self, other: Self) -> Result<(), RegistryError> {
        Err(RegistryError::Duplicate {
            kind: Self::KIND,
            key: other.key().to_owned(),
        })
    }
}

/// Picks which of a tool's registered versions a session sees.
pub trait VersionChooser {
    /// An index into `versions` (the registered versions of `tool`, lowest first; at least
    /// two). Out of range reads as 0.
    fn choose(&self, tool: &str, versions: &[Arc<str>]) -> usize;
}

/// Every registered version of one tool name, lowest first (see [`Tool::version`]).
#[derive(Clone)]
pub(crate) struct ToolVersions {
    tools: Vec<VersionedTool>,
    versions: Arc<[Arc<str>]>,
}

/// One registered version of a tool, with the arguments it mirrors in HTTP headers (its
/// `x-mcp-header` annotations, read once when it is registered: a 2026-07-28 call over
/// HTTP is checked against the version its caller sees).
#[derive(Clone)]
struct VersionedTool {
    tool: Tool,
    headers: Option<Arc<[HeaderParam]>>,
}

impl ToolVersions {
    /// One version, with the header parameters [`check_tool`] found in it.
    fn of(tool: Tool, headers: Vec<HeaderParam>) -> Self {
        Self {
            versions: Arc::from(vec![tool.version.clone()]),
            tools: vec![VersionedTool {
                tool,
                headers: (!headers.is_empty()).then(|| headers.into()),
            }],
        }
    }

    /// The version `chooser` picks (the only one, without asking, for a single version).
    fn chosen(&self, chooser: &dyn VersionChooser) -> &VersionedTool {
        match self.tools.as_slice() {
            [only] => only,
            tools => {
                &tools[chooser
                    .choose(tools[0].tool.name(), &self.versions)
                    .min(tools.len() - 1)]
            }
        }
    }

    /// Whether a version mirrors arguments in HTTP headers.
    fn mirrors_headers(&self) -> bool {
        self.tools.iter().any(|v| v.headers.is_some())
    }

    /// Removes one version; says whether it was there.
    fn remove(&mut self, version: &str) -> bool {
        let before = self.tools.len();
        self.tools.retain(|v| &*v.tool.version != version);
        self.versions = self.tools.iter().map(|v| v.tool.version.clone()).collect();
        self.tools.len() != before
    }
}

impl Registered for ToolVersions {
    const KIND: &'static str = "tool";
    const LIST: ListKind = ListKind::Tools;

    fn key(&self) -> &str {
        self.tools[0].tool.name()
    }

    fn versions(&self) -> &Arc<[Arc<str>]> {
        &self.versions
    }

    fn serialize_definition(&self, variant: usize, version: ProtocolVersion) -> String {
        let tool = &self.tools[variant.min(self.tools.len() - 1)].tool;
        serde_json::to_string(&crate::model::ForVersion(&*tool.definition, version))
            .unwrap_or_default()
    }

    fn merge(&mut self, other: Self) -> Result<(), RegistryError> {
        for added in other.tools {
            if self
                .tools
                .iter()
                .any(|v| v.tool.version == added.tool.version)
            {
                return Err(RegistryError::DuplicateVersion {
                    name: added.tool.name().to_owned(),
                    version: added.tool.version.to_string(),
                });
            }
            self.tools.push(added);
        }
        self.tools
            .sort_by(|a, b| compare_versions(&a.tool.version, &b.tool.version));
        self.versions = self.tools.iter().map(|v| v.tool.version.clone()).collect();
        Ok(())
    }
}

/// The tools, resources, templates and prompts of a server; a cheap handle (clones share
/// them). Changes reach every initialized session as `notifications/*/list_changed`.
///
/// ```
/// use mcp_ws::{Registry, Tool, ToolError, RequestContext};
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Args {}
/// async fn ping(_: Args, _: RequestContext) -> Result<String, ToolError> { Ok("pong".into()) }
/// let registry = Registry::default();
/// registry.add_tool(Tool::new("ping", "Answers pong", ping)).unwrap();
/// assert!(registry.add_tool(Tool::new("ping", "Again", ping)).is_err());
/// registry.disable_tool("ping");
/// assert!(registry.remove_tool("ping"));
/// ```
#[derive(Clone, Default)]
pub struct Registry {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    tools: Kind<ToolVersions>,
    resources: Kind<Resource>,
    templates: Kind<ResourceTemplate>,
    prompts: Kind<Prompt>,
    bus: ChangeBus,
    /// Set once a tool whose calls may become tasks was registered.
    ever_tasks: AtomicBool,
    /// Set once a tool mirroring arguments in HTTP headers was registered or shown in a
    /// view: until then a call's headers are not looked up (most servers have none).
    ever_tool_headers: AtomicBool,
    /// What some sessions (or identities) see in place of some entries.
    views: views::Views,
}

/// One kind: lookups by key, and the list snapshot.
struct Kind<T> {
    items: DashMap<String, Entry<T>, FastHash>,
    snapshot: RwLock<Arc<Snapshot>>,
    /// Serializes writers, so each rebuilds the snapshot from a map nobody else changes.
    writer: Mutex<()>,
    /// Set once anything of this kind was registered: its capability is declared from then.
    ever: AtomicBool,
    /// How many times this kind changed (see the module docs).
    generation: AtomicU64,
}

struct Entry<T> {
    item: T,
    enabled: bool,
}

impl<T> Default for Kind<T> {
    fn default() -> Self {
        Self {
            items: DashMap::default(),
            snapshot: RwLock::default(),
            writer: Mutex::new(()),
            ever: AtomicBool::new(false),
            generation: AtomicU64::new(0),
        }
    }
}

impl<T: Registered> Kind<T> {
    fn add(&self, item: T, bus: &ChangeBus) -> Result<(), RegistryError> {
        match self.change(&[], vec![item], Vec::new(), bus).pop() {
            Some(refused) => Err(refused),
            None => Ok(()),
        }
    }

    /// Removes `removed`, adds `added` (refusing taken keys, returned) and replaces the
    /// entries of `refreshed` that are present, under one writer lock: one snapshot, and one
    /// change on the bus if anything came or went. A refresh alone (a file's new size) is
    /// not a change of the list: it reaches whoever lists next, without a notification.
    fn change(
        &self,
        removed: &[String],
        added: Vec<T>,
        refreshed: Vec<T>,
        bus: &ChangeBus,
    ) -> Vec<RegistryError> {
        let (listed, refused) = self.change_untold(removed, added, refreshed, true);
        if listed {
            bus.publish(BusEvent::Lists(T::LIST.change()));
        }
        refused.into_iter().map(|(_, refusal)| refusal).collect()
    }

    /// [`change`](Self::change) without telling anyone, so that a [`Batch`] of several
    /// kinds is told once: says whether anything came or went, and returns the refused
    /// additions by key. Without `merge`, an addition whose key is taken is refused even
    /// where it would be another version of a tool there ([`Batch`]: one owner a key).
    fn change_untold(
        &self,
        removed: &[String],
        added: Vec<T>,
        refreshed: Vec<T>,
        merge: bool,
    ) -> (bool, Vec<(String, RegistryError)>) {
        let _writer = lock(&self.writer);
        let mut listed = false;
        for key in removed {
            listed |= self.items.remove(key.as_str()).is_some();
        }
        let mut refused = Vec::new();
        for item in added {
            match self.items.entry(item.key().to_owned()) {
                dashmap::Entry::Occupied(slot) if !merge => refused.push((
                    slot.key().clone(),
                    RegistryError::Duplicate {
                        kind: T::KIND,
                        key: slot.key().clone(),
                    },
                )),
                dashmap::Entry::Occupied(mut slot) => match slot.get_mut().item.merge(item) {
                    Ok(()) => listed = true,
                    Err(refusal) => refused.push((slot.key().clone(), refusal)),
                },
                dashmap::Entry::Vacant(slot) => {
                    slot.insert(Entry {
                        item,
                        enabled: true,
                    });
                    self.ever.store(true, Ordering::Relaxed);
                    listed = true;
                }
            }
        }
        let mut redefined = false;
        for item in refreshed {
            if let Some(mut entry) = self.items.get_mut(item.key()) {
                entry.item = item;
                redefined = true;
            }
        }
        if listed || redefined {
            self.rebuild();
        }
        (listed, refused)
    }

    fn remove(&self, key: &str, bus: &ChangeBus) -> bool {
        let _writer = lock(&self.writer);
        let removed = self.items.remove(key).is_some();
        if removed {
            self.changed(bus);
        }
        removed
    }

    fn set_enabled(&self, key: &str, enabled: bool, bus: &ChangeBus) -> bool {
        let _writer = lock(&self.writer);
        let changed = match self.items.get_mut(key) {
            Some(mut entry) if entry.enabled != enabled => {
                entry.enabled = enabled;
                true
            }
            _ => false,
        };
        if changed {
            self.changed(bus);
        }
        changed
    }

    /// Rebuilds the snapshot (the writer lock is held) and tells the sessions.
    fn changed(&self, bus: &ChangeBus) {
        self.rebuild();
        bus.publish(BusEvent::Lists(T::LIST.change()));
    }

    /// Rebuilds the snapshot (the writer lock is held).
    fn rebuild(&self) {
        let items: Vec<T> = self
            .items
            .iter()
            .filter(|e| e.enabled)
            .map(|e| e.item.clone())
            .collect();
        *self.snapshot.write().unwrap_or_else(|e| e.into_inner()) =
            Arc::new(Self::snapshot_of(items));
        // Last, after the map and the snapshot: a cache that sees the new count sees them.
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The list snapshot of `items`, in key order.
    fn snapshot_of(mut items: Vec<T>) -> Snapshot {
        items.sort_by(|a, b| a.key().cmp(b.key()));
        Snapshot::new(items.into_iter().map(|item| {
            let key: Arc<str> = item.key().into();
            let versions = item.versions().clone();
            let encode: snapshot::Encoder =
                Box::new(move |variant, version| item.serialize_definition(variant, version));
            snapshot::Listed {
                key,
                versions,
                encode,
            }
        }))
    }

    fn get(&self, key: &str) -> Option<T> {
        self.items
            .get(key)
            .filter(|e| e.enabled)
            .map(|e| e.item.clone())
    }

    fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl<T: Viewed> Kind<T> {
    /// The enabled entry of `key` as `view` (a viewer's views, if it has any) shows it.
    fn get_seen(&self, view: Option<&ViewSet>, key: &str) -> Option<T> {
        match view.map(|v| v.seen(self, key)) {
            Some(Seen::Shown(entry)) => Some(entry),
            Some(Seen::Hidden) => None,
            Some(Seen::AsRegistered) | None => self.get(key),
        }
    }

    /// The enabled entries `view` (a viewer's views, if it has any) shows, unsorted.
    fn items_seen(&self, view: Option<&ViewSet>) -> Vec<T> {
        match view {
            Some(view) if view.touches::<T>() => view.items(self),
            _ => self
                .items
                .iter()
                .filter(|e| e.enabled)
                .map(|e| e.item.clone())
                .collect(),
        }
    }

    /// The list `view` (a viewer's views, if it has any) shows.
    fn snapshot_seen(&self, view: Option<&ViewSet>) -> Arc<Snapshot> {
        match view {
            Some(view) => view.snapshot(self),
            None => self.snapshot(),
        }
    }
}

/// The most characters a tool's or prompt's name may have: the spec's bound for tool names
/// (2025-11-25, "Tool names"), this server's for prompts too.
const MAX_NAME_CHARS: usize = 128;

/// A tool's or prompt's `name` as clients can use it: not empty, at most
/// [`MAX_NAME_CHARS`] characters, no control character (clients show names, and send them
/// back as written).
fn check_name(kind: &'static str, name: &str) -> Result<(), RegistryError> {
    // Counted no further than one past the bound: a name is an upstream's to choose, of
    // any length a message holds.
    let reason = if name.is_empty() {
        "an empty name"
    } else if name.chars().nth(MAX_NAME_CHARS).is_some() {
        "a name over 128 characters"
    } else if name.chars().any(char::is_control) {
        "a control character in its name"
    } else {
        return Ok(());
    };
    Err(RegistryError::Invalid {
        kind,
        name: name.chars().take(64).collect(),
        reason,
    })
}

/// Checks what clients require of a prompt: its name as [`check_name`] does, and each
/// argument named once (a client sends arguments by name). Linear in the arguments: an
/// upstream's prompt may list as many as a message holds.
pub(crate) fn check_prompt(prompt: &Prompt) -> Result<(), RegistryError> {
    let definition = &prompt.definition;
    check_name("prompt", &definition.name)?;
    let mut names = std::collections::HashSet::with_capacity(definition.arguments.len());
    if definition
        .arguments
        .iter()
        .all(|argument| names.insert(argument.name.as_str()))
    {
        return Ok(());
    }
    Err(RegistryError::Invalid {
        kind: "prompt",
        name: definition.name.chars().take(64).collect(),
        reason: "an argument named twice",
    })
}

/// Checks what MCP requires of a tool's schemas (objects) and what clients require of its
/// name and header annotations; returns the arguments it mirrors in headers.
fn check_tool(tool: &Tool) -> Result<Vec<HeaderParam>, RegistryError> {
    let definition = &tool.definition;
    check_name("tool", &definition.name)?;
    let input_schema = definition.input_schema.value();
    for (member, schema) in [
        ("inputSchema", Some(&input_schema)),
        ("outputSchema", definition.output_schema.as_ref()),
    ] {
        if schema.is_some_and(|s| s.get("type").and_then(|t| t.as_str()) != Some("object")) {
            return Err(RegistryError::InvalidToolSchema {
                tool: definition.name.clone(),
                member,
            });
        }
    }
    crate::protocol::mcp::header_params(&input_schema).map_err(|reason| {
        RegistryError::InvalidHeaderAnnotation {
            tool: definition.name.clone(),
            reason,
        }
    })
}

/// A resource read's target: a fixed resource, or a template and the URI's variables.
pub(crate) enum ResourceTarget {
    Fixed(Resource),
    Templated(ResourceTemplate, TemplateVariables),
}

/// No versions: what the kinds without versions hold.
fn unversioned() -> &'static Arc<[Arc<str>]> {
    static NONE: std::sync::OnceLock<Arc<[Arc<str>]>> = std::sync::OnceLock::new();
    NONE.get_or_init(|| Arc::from(Vec::new()))
}

macro_rules! registered {
    ($type:ty, $kind:literal, $list:expr, $key:ident) => {
        impl Registered for $type {
            const KIND: &'static str = $kind;
            const LIST: ListKind = $list;
            fn key(&self) -> &str {
                &self.definition.$key
            }
            fn versions(&self) -> &Arc<[Arc<str>]> {
                unversioned()
            }
            fn serialize_definition(&self, _variant: usize, version: ProtocolVersion) -> String {
                serde_json::to_string(&crate::model::ForVersion(&*self.definition, version))
                    .unwrap_or_default()
            }
        }
    };
}

registered!(Resource, "resource", ListKind::Resources, uri);
registered!(
    ResourceTemplate,
    "resource template",
    ListKind::ResourceTemplates,
    uri_template
);
registered!(Prompt, "prompt", ListKind::Prompts, name);

impl Registry {
    /// Registers a tool; its name and version must be free. A tool of a name already
    /// registered in other versions becomes one more version of it (see [`Tool::version`]).
    ///
    /// # Errors
    /// [`RegistryError::DuplicateVersion`] when a tool of that name is registered in that
    /// version,
    /// [`RegistryError::InvalidToolSchema`] when its input or output schema does not
    /// describe an object (a [`Json`](crate::Json) output of a type that is not a struct),
    /// [`RegistryError::Invalid`] when its name is empty, over 128 characters or holds a
    /// control character.
    pub fn add_tool(&self, tool: Tool) -> Result<(), RegistryError> {
        let headers = check_tool(&tool)?;
        let tasks = tool.definition.task_support != crate::tool::TaskSupport::Forbidden;
        // Before the tool can be called: a call in between would skip its headers' check.
        if !headers.is_empty() {
            self.inner.ever_tool_headers.store(true, Ordering::Relaxed);
        }
        self.inner
            .tools
            .add(ToolVersions::of(tool, headers), &self.inner.bus)?;
        if tasks {
            self.inner.ever_tasks.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Removes a tool, every version of it; says whether there was one.
    pub fn remove_tool(&self, name: &str) -> bool {
        self.inner.tools.remove(name, &self.inner.bus)
    }

    /// Removes one version of a tool (the tool itself with its last version); says whether
    /// it was registered.
    pub fn remove_tool_version(&self, name: &str, version: &str) -> bool {
        let kind = &self.inner.tools;
        let _writer = lock(&kind.writer);
        let (removed, emptied) = match kind.items.get_mut(name) {
            Some(mut entry) => {
                let removed = entry.item.remove(version);
                (removed, entry.item.tools.is_empty())
            }
            None => (false, false),
        };
        if emptied {
            kind.items.remove(name);
        }
        if removed {
            kind.changed(&self.inner.bus);
        }
        drop(_writer);
        removed
    }

    /// The registered versions of a tool, lowest first (none when it is not registered).
    pub fn tool_versions(&self, name: &str) -> Vec<String> {
        self.inner
            .tools
            .items
            .get(name)
            .map(|entry| entry.item.versions.iter().map(|v| v.to_string()).collect())
            .unwrap_or_default()
    }

    /// Lists and serves a disabled tool (every version) again; says whether it was disabled.
    pub fn enable_tool(&self, name: &str) -> bool {
        self.inner.tools.set_enabled(name, true, &self.inner.bus)
    }

    /// Hides a tool (every version) from lists and calls (an unknown tool then) without
    /// removing it; says whether it was enabled.
    pub fn disable_tool(&self, name: &str) -> bool {
        self.inner.tools.set_enabled(name, false, &self.inner.bus)
    }

    /// Registers a resource; its URI must be free.
    ///
    /// # Errors
    /// [`RegistryError::Duplicate`] when a resource with that URI is registered.
    pub fn add_resource(&self, resource: Resource) -> Result<(), RegistryError> {
        self.inner.resources.add(resource, &self.inner.bus)
    }

    /// Removes a resource; says whether there was one.
    pub fn remove_resource(&self, uri: &str) -> bool {
        self.inner.resources.remove(uri, &self.inner.bus)
    }

    /// Enables a disabled resource; says whether it was disabled.
    pub fn enable_resource(&self, uri: &str) -> bool {
        self.inner.resources.set_enabled(uri, true, &self.inner.bus)
    }

    /// Disables a resource; says whether it was enabled.
    pub fn disable_resource(&self, uri: &str) -> bool {
        self.inner
            .resources
            .set_enabled(uri, false, &self.inner.bus)
    }

    /// Registers a resource template; the template must be free and valid.
    ///
    /// # Errors
    /// [`RegistryError::Duplicate`], or [`RegistryError::InvalidTemplate`].
    pub fn add_resource_template(&self, template: ResourceTemplate) -> Result<(), RegistryError> {
        if let Err(reason) = &template.template {
            return Err(RegistryError::InvalidTemplate(reason.clone()));
        }
        self.inner.templates.add(template, &self.inner.bus)
    }

    /// Removes a resource template; says whether there was one.
    pub fn remove_resource_template(&self, uri_template: &str) -> bool {
        self.inner.templates.remove(uri_template, &self.inner.bus)
    }

    /// Enables a disabled resource template; says whether it was disabled.
    pub fn enable_resource_template(&self, uri_template: &str) -> bool {
        self.inner
            .templates
            .set_enabled(uri_template, true, &self.inner.bus)
    }

    /// Disables a resource template; says whether it was enabled.
    pub fn disable_resource_template(&self, uri_template: &str) -> bool {
        self.inner
            .templates
            .set_enabled(uri_template, false, &self.inner.bus)
    }

    /// Registers a prompt; its name must be free.
    ///
    /// # Errors
    /// [`RegistryError::Duplicate`] when a prompt of that name is registered,
    /// [`RegistryError::Invalid`] when its name is empty, over 128 characters or holds a
    /// control character, or it names an argument twice.
    pub fn add_prompt(&self, prompt: Prompt) -> Result<(), RegistryError> {
        check_prompt(&prompt)?;
        self.inner.prompts.add(prompt, &self.inner.bus)
    }

    /// Removes a prompt; says whether there was one.
    pub fn remove_prompt(&self, name: &str) -> bool {
        self.inner.prompts.remove(name, &self.inner.bus)
    }

    /// Enables a disabled prompt; says whether it was disabled.
    pub fn enable_prompt(&self, name: &str) -> bool {
        self.inner.prompts.set_enabled(name, true, &self.inner.bus)
    }

    /// Disables a prompt; says whether it was enabled.
    pub fn disable_prompt(&self, name: &str) -> bool {
        self.inner.prompts.set_enabled(name, false, &self.inner.bus)
    }

    /// Removes, adds and refreshes resources at once (the files of a watched directory): one
    /// list snapshot, and one `list_changed` if a resource came or went; a refresh alone
    /// (a new size) sends none. Returns the additions refused because their URI is taken.
    pub(crate) fn change_resources(
        &self,
        removed: &[String],
        added: Vec<Resource>,
        refreshed: Vec<Resource>,
    ) -> Vec<RegistryError> {
        self.inner
            .resources
            .change(removed, added, refreshed, &self.inner.bus)
    }

    /// Declares the `resources` capability even while none is registered (a watched
    /// directory that is empty for now).
    pub(crate) fn offer_resources(&self) {
        self.inner.resources.ever.store(true, Ordering::Relaxed);
    }

    /// Tells the sessions subscribed to `uri` that the resource changed
    /// (`notifications/resources/updated`).
    pub fn resource_updated(&self, uri: &str) {
        self.inner
            .bus
            .publish(BusEvent::ResourceUpdated(uri.into()));
    }

    /// Tells the subscribed sessions of `viewer` alone that the resource at `uri` changed
    /// (a resource of its own child, which other sessions do not read).
    pub(crate) fn view_resource_updated(&self, viewer: &Viewer, uri: &str) {
        self.inner
            .bus
            .publish(BusEvent::ViewUpdated(viewer.clone(), uri.into()));
    }

    /// The bus the registry publishes its changes on.
    pub(crate) fn bus(&self) -> &ChangeBus {
        &self.inner.bus
    }

    /// [`tool_handler`](Self::tool_handler) through a session's `cache`: the same answer
    /// while the tools and the views do not change, and the viewer is the one the cache was
    /// filled for. The cache must belong to one chooser (one identity): a session's, whose
    /// viewers are the session itself (handshake-era requests) and its identity
    /// (2026-07-28 requests on the same connection), each seeing its own views.
    pub(crate) fn cached_tool_handler(
        &self,
        name: &str,
        chooser: &dyn VersionChooser,
        viewer: ViewerRef<'_>,
        cache: &ToolCache,
    ) -> Result<CachedTool, Error> {
        // Both counts only grow, so their sum moves whenever either does.
        let generation = self
            .inner
            .tools
            .generation
            .load(Ordering::Acquire)
            .wrapping_add(self.inner.views.generation.load(Ordering::Acquire));
        // Each of the session's two viewers has its own entries: a handler found through one
        // view is never taken for the other's (one the other's view hides), and a connection
        // that alternates them keeps both.
        let entries = cache.0.get_or_init(Box::default);
        let cache = &entries.by_viewer[usize::from(matches!(viewer, ViewerRef::Session(_)))];
        let mut tools = cache.tools.borrow_mut();
        if cache.generation.replace(generation) != generation {
            tools.clear();
        }
        if let Some((handler, support)) = tools.get(name) {
            return Ok((handler.clone(), *support));
        }
        let found = self.tool_handler(name, chooser, viewer)?;
        // Only registered tools get in, and at most `MAX` of them: the client names the tools.
        if tools.len() == ToolCache::MAX {
            tools.clear();
        }
        tools.insert(name.into(), found.clone());
        Ok(found)
    }

    /// The handler of an enabled tool as `viewer` sees it, in the version `chooser` picks
    /// when it has several, with its task support (one `Arc` clone).
    pub(crate) fn tool_handler(
        &self,
        name: &str,
        chooser: &dyn VersionChooser,
        viewer: ViewerRef<'_>,
    ) -> Result<CachedTool, Error> {
        self.seen_versioned(name, chooser, viewer, |v| {
            (v.tool.handler.clone(), v.tool.definition.task_support)
        })
        .ok_or_else(|| Error::UnknownTool { name: name.into() })
    }

    /// The arguments that the version of tool `name` which `viewer` sees (as `chooser`
    /// picks it) mirrors in HTTP headers (`x-mcp-header`), if any: what a 2026-07-28
    /// `tools/call` over HTTP is checked against.
    pub(crate) fn tool_header_params(
        &self,
        name: &str,
        chooser: &dyn VersionChooser,
        viewer: ViewerRef<'_>,
    ) -> Option<Arc<[HeaderParam]>> {
        if !self.inner.ever_tool_headers.load(Ordering::Relaxed) {
            return None;
        }
        self.seen_versioned(name, chooser, viewer, |v| v.headers.clone())
            .flatten()
    }

    /// `pick` of the version of the enabled tool `name` that `viewer` sees, as `chooser`
    /// picks it when it has several; `None` when `viewer` sees no such tool.
    fn seen_versioned<R>(
        &self,
        name: &str,
        chooser: &dyn VersionChooser,
        viewer: ViewerRef<'_>,
        pick: impl FnOnce(&VersionedTool) -> R,
    ) -> Option<R> {
        let pick = |versions: &ToolVersions| pick(versions.chosen(chooser));
        if let Some(view) = self.inner.views.of(viewer) {
            return match view.seen(&self.inner.tools, name) {
                Seen::Shown(versions) => Some(pick(&versions)),
                Seen::Hidden => None,
                Seen::AsRegistered => self.registered_tool(name, pick),
            };
        }
        self.registered_tool(name, pick)
    }

    /// `pick` of the registry's own enabled entry of tool `name` (no view asked).
    fn registered_tool<R>(&self, name: &str, pick: impl FnOnce(&ToolVersions) -> R) -> Option<R> {
        self.inner
            .tools
            .items
            .get(name)
            .filter(|e| e.enabled)
            .map(|e| pick(&e.item))
    }

    /// What a read of `uri` by `viewer` reaches: a fixed resource first, else the first
    /// template (in template order) that matches.
    pub(crate) fn resource_target(
        &self,
        uri: &str,
        viewer: ViewerRef<'_>,
    ) -> Option<ResourceTarget> {
        let view = self.inner.views.of(viewer);
        if let Some(resource) = self.inner.resources.get_seen(view.as_deref(), uri) {
            return Some(ResourceTarget::Fixed(resource));
        }
        let mut templates = self.inner.templates.items_seen(view.as_deref());
        templates.sort_by(|a, b| a.uri_template().cmp(b.uri_template()));
        templates.into_iter().find_map(|template| {
            let variables = template.template.as_ref().ok()?.matches(uri)?;
            Some(ResourceTarget::Templated(template, variables))
        })
    }

    /// The target of `uri` as the client spelled it or, failing that, as RFC 3986 makes it
    /// equivalent ([`normalized_uri`](crate::resource::normalized_uri)), with the spelling
    /// that found it; each spelling only if `may_use` it (the caller's policy), so that
    /// another spelling never reaches what the policy keeps from the client.
    pub(crate) fn find_resource<'u>(
        &self,
        uri: &'u str,
        viewer: ViewerRef<'_>,
        may_use: impl Fn(&str) -> bool,
    ) -> Option<(Cow<'u, str>, ResourceTarget)> {
        if may_use(uri) {
            if let Some(target) = self.resource_target(uri, viewer) {
                return Some((Cow::Borrowed(uri), target));
            }
        }
        match crate::resource::normalized_uri(uri) {
            Cow::Borrowed(_) => None,
            Cow::Owned(normal) => {
                let target = may_use(&normal)
                    .then(|| self.resource_target(&normal, viewer))
                    .flatten()?;
                Some((Cow::Owned(normal), target))
            }
        }
    }

    /// An enabled prompt, as `viewer` sees it.
    pub(crate) fn prompt(&self, name: &str, viewer: ViewerRef<'_>) -> Option<Prompt> {
        let view = self.inner.views.of(viewer);
        self.inner.prompts.get_seen(view.as_deref(), name)
    }

    /// An enabled resource template, as `viewer` sees it.
    pub(crate) fn resource_template(
        &self,
        uri_template: &str,
        viewer: ViewerRef<'_>,
    ) -> Option<ResourceTemplate> {
        let view = self.inner.views.of(viewer);
        self.inner.templates.get_seen(view.as_deref(), uri_template)
    }

    /// One page of a list, for a session on `version`, of the entries whose key `visible`
    /// admits (all without a filter) as `viewer` sees them, showing of each tool the version
    /// `chooser` picks.
    pub(crate) fn page(
        &self,
        kind: ListKind,
        version: ProtocolVersion,
        cursor: Option<&str>,
        page_size: usize,
        visible: Option<&dyn Fn(&str) -> bool>,
        seen_by: (&dyn VersionChooser, ViewerRef<'_>),
    ) -> Result<Page, Error> {
        let (chooser, viewer) = seen_by;
        let view = self.inner.views.of(viewer);
        let view = view.as_deref();
        let snapshot = match kind {
            ListKind::Tools => self.inner.tools.snapshot_seen(view),
            ListKind::Resources => self.inner.resources.snapshot_seen(view),
            ListKind::ResourceTemplates => self.inner.templates.snapshot_seen(view),
            ListKind::Prompts => self.inner.prompts.snapshot_seen(view),
        };
        snapshot.page(version, cursor, page_size, visible, chooser)
    }

    /// Changes what `owner` shows `viewer` in place of what it registered (`update` gets
    /// the view as it is, and returns the lists it changed; a view left empty shows the
    /// registry's entries again), and tells that viewer's sessions of the lists that
    /// changed. A viewer's views live on this node only, as the children they come from do.
    pub(crate) fn update_view(
        &self,
        viewer: &Viewer,
        owner: &str,
        update: impl FnOnce(&mut OwnerView) -> Changes,
    ) {
        // Set while the view is built, before it is published.
        let changed = self.inner.views.update(viewer, owner, |view| {
            let changed = update(view);
            let shown = view.tools.as_ref().map(|tools| tools.shown.values());
            if shown.is_some_and(|mut tools| tools.any(ToolVersions::mirrors_headers)) {
                self.inner.ever_tool_headers.store(true, Ordering::Relaxed);
            }
            changed
        });
        if !changed.is_empty() {
            self.inner
                .bus
                .publish_local(BusEvent::View(viewer.clone(), changed));
        }
    }

    /// Whether an entry of kind `list` is registered under `key` (enabled or not): a view
    /// may not show another entry of that key, unless it hides that one (its own owner's).
    pub(crate) fn holds(&self, list: ListKind, key: &str) -> bool {
        let i = &self.inner;
        match list {
            ListKind::Tools => i.tools.items.contains_key(key),
            ListKind::Resources => i.resources.items.contains_key(key),
            ListKind::ResourceTemplates => i.templates.items.contains_key(key),
            ListKind::Prompts => i.prompts.items.contains_key(key),
        }
    }

    /// A view part of `tools` (each checked as [`add_tool`](Self::add_tool) would; one it
    /// refuses is left out, with a warning) hiding the registered tools of `hidden`.
    pub(crate) fn tool_view(
        hidden: std::collections::HashSet<String>,
        tools: Vec<Tool>,
    ) -> Arc<KindView<ToolVersions>> {
        let tools = tools
            .into_iter()
            .filter_map(|tool| match check_tool(&tool) {
                Ok(headers) => Some(ToolVersions::of(tool, headers)),
                Err(error) => {
                    tracing::warn!(%error, "a tool of a view left out");
                    None
                }
            })
            .collect();
        KindView::new(hidden, tools)
    }

    /// Which capabilities to declare: a kind is declared once anything of it was registered.
    #[doc(hidden)]
    pub fn offers(&self) -> Offers {
        let i = &self.inner;
        Offers {
            tools: i.tools.ever.load(Ordering::Relaxed),
            resources: i.resources.ever.load(Ordering::Relaxed)
                || i.templates.ever.load(Ordering::Relaxed),
            prompts: i.prompts.ever.load(Ordering::Relaxed),
            completions: i.prompts.ever.load(Ordering::Relaxed)
                || i.templates.ever.load(Ordering::Relaxed),
            tasks: i.ever_tasks.load(Ordering::Relaxed),
        }
    }
}

/// Changes of several entries, of any kinds, that [`Registry::apply`] makes at once: one
/// list snapshot per kind that changed, and one change on the bus for them all, so that a
/// session is told once per list however many entries came and went (a gateway upstream's
/// re-list: made one entry at a time, replacing 8,000 tools cost a minute of rebuilds and
/// sent each session thousands of notifications, attack run 52c G1). Each entry is checked
/// as it is added to the batch, as the `add_*` methods of [`Registry`] check it; a key
/// taken is found when the batch is applied.
#[derive(Default)]
pub(crate) struct Batch {
    tools: Pending<ToolVersions>,
    resources: Pending<Resource>,
    templates: Pending<ResourceTemplate>,
    prompts: Pending<Prompt>,
    /// A tool added mirrors arguments in HTTP headers.
    tool_headers: bool,
    /// The names of the tools added whose calls may become tasks.
    task_tools: Vec<String>,
}

/// One kind's part of a [`Batch`]: removed first, then added.
struct Pending<T> {
    removed: Vec<String>,
    added: Vec<T>,
}

impl<T> Default for Pending<T> {
    fn default() -> Self {
        Self {
            removed: Vec::new(),
            added: Vec::new(),
        }
    }
}

impl<T: Registered> Pending<T> {
    /// Applies this part to `kind` without telling anyone; pushes its refusals to
    /// `refused` and says whether the list changed.
    fn apply(self, kind: &Kind<T>, refused: &mut Vec<Refused>) -> bool {
        // Never merged into an entry there: a tool of another owner (a built-in of another
        // version) would count as this batch's owner's, and its next re-list would remove
        // every version (review 58 #5).
        let (listed, refusals) = kind.change_untold(&self.removed, self.added, Vec::new(), false);
        refused.extend(refusals.into_iter().map(|(key, error)| Refused {
            list: T::LIST,
            key,
            error,
        }));
        listed
    }
}

/// An addition of a [`Batch`] that [`Registry::apply`] refused: its key was taken.
#[derive(Debug)]
pub(crate) struct Refused {
    /// The kind of the entry.
    pub list: ListKind,
    /// Its name, URI or template.
    pub key: String,
    /// Why it was refused.
    pub error: RegistryError,
}

impl Batch {
    /// Removes a tool, every version of it.
    pub(crate) fn remove_tool(&mut self, name: &str) {
        self.tools.removed.push(name.to_owned());
    }

    /// Adds a tool, checked as [`Registry::add_tool`] checks it.
    pub(crate) fn add_tool(&mut self, tool: Tool) -> Result<(), RegistryError> {
        let headers = check_tool(&tool)?;
        self.tool_headers |= !headers.is_empty();
        if tool.definition.task_support != crate::tool::TaskSupport::Forbidden {
            self.task_tools.push(tool.name().to_owned());
        }
        self.tools.added.push(ToolVersions::of(tool, headers));
        Ok(())
    }

    /// Removes a resource.
    pub(crate) fn remove_resource(&mut self, uri: &str) {
        self.resources.removed.push(uri.to_owned());
    }

    /// Adds a resource.
    pub(crate) fn add_resource(&mut self, resource: Resource) -> Result<(), RegistryError> {
        self.resources.added.push(resource);
        Ok(())
    }

    /// Removes a resource template.
    pub(crate) fn remove_resource_template(&mut self, uri_template: &str) {
        self.templates.removed.push(uri_template.to_owned());
    }

    /// Adds a resource template, checked as [`Registry::add_resource_template`] checks it.
    pub(crate) fn add_resource_template(
        &mut self,
        template: ResourceTemplate,
    ) -> Result<(), RegistryError> {
        if let Err(reason) = &template.template {
            return Err(RegistryError::InvalidTemplate(reason.clone()));
        }
        self.templates.added.push(template);
        Ok(())
    }

    /// Removes a prompt.
    pub(crate) fn remove_prompt(&mut self, name: &str) {
        self.prompts.removed.push(name.to_owned());
    }

    /// Adds a prompt, checked as [`Registry::add_prompt`] checks it.
    pub(crate) fn add_prompt(&mut self, prompt: Prompt) -> Result<(), RegistryError> {
        check_prompt(&prompt)?;
        self.prompts.added.push(prompt);
        Ok(())
    }
}

impl Registry {
    /// Makes the changes of `batch`: each kind's removals, then its additions (a key taken,
    /// by an entry registered before or one added earlier in the batch, is refused: the
    /// first keeps it), under that kind's writer lock, with one snapshot rebuilt per kind;
    /// then one change on the bus naming every list that changed. Returns the refused
    /// additions.
    pub(crate) fn apply(&self, batch: Batch) -> Vec<Refused> {
        let Batch {
            tools,
            resources,
            templates,
            prompts,
            tool_headers,
            task_tools,
        } = batch;
        let inner = &self.inner;
        // Before the tools can be called: a call in between would skip its headers' check.
        if tool_headers {
            inner.ever_tool_headers.store(true, Ordering::Relaxed);
        }
        let mut refused = Vec::new();
        let mut changed = Changes::default();
        let mut note = |listed: bool, list: ListKind| {
            if listed {
                changed = changed.union(list.change());
            }
        };
        note(tools.apply(&inner.tools, &mut refused), ListKind::Tools);
        note(
            resources.apply(&inner.resources, &mut refused),
            ListKind::Resources,
        );
        note(
            templates.apply(&inner.templates, &mut refused),
            ListKind::ResourceTemplates,
        );
        note(
            prompts.apply(&inner.prompts, &mut refused),
            ListKind::Prompts,
        );
        let tasks = task_tools.iter().any(|name| {
            !refused
                .iter()
                .any(|r| r.list == ListKind::Tools && &r.key == name)
        });
        if tasks {
            inner.ever_tasks.store(true, Ordering::Relaxed);
        }
        if !changed.is_empty() {
            inner.bus.publish(BusEvent::Lists(changed));
        }
        refused
    }
}

/// The tools one session called, by name, with the version its identity's rollout chose:
/// kept while the registry's tools do not change (see the module docs). Made on the first
/// call: every session holds one inline, and most WebSocket sessions at rest have called
/// nothing (an idle session's size: benches/README.md, "An idle session's actor in 1 KiB").
#[derive(Default)]
pub(crate) struct ToolCache(std::cell::OnceCell<Box<ToolCacheEntries>>);

/// What a [`ToolCache`] holds once a tool was called: the entries of its identity's viewer
/// (2026-07-28 requests), then of its session's.
#[derive(Default)]
struct ToolCacheEntries {
    by_viewer: [ViewerEntries; 2],
}

/// The tools one viewer found.
#[derive(Default)]
struct ViewerEntries {
    /// The tools' generation the entries belong to.
    generation: Cell<u64>,
    tools: RefCell<HashMap<Box<str>, CachedTool, FastHash>>,
}

/// A tool's handler and whether its calls may become tasks.
pub(crate) type CachedTool = (Arc<dyn ToolHandler>, crate::tool::TaskSupport);

impl ToolCache {
    /// The most tools a session keeps; past that it starts over.
    const MAX: usize = 32;
}

/// Orders two versions: dot-separated parts compared in turn, numerically when both are
/// numbers, else as text (a number before text); a version that is a prefix of the other
/// comes first (`1` < `1.0`).
pub fn compare_versions(a: &str, b: &str) -> std::cmp::Ordering {
    let mut left = a.split('.');
    let mut right = b.split('.');
    loop {
        match (left.next(), right.next()) {
            (None, None) => return std::cmp::Ordering::Equal,
            (None, Some(_)) => return std::cmp::Ordering::Less,
            (Some(_), None) => return std::cmp::Ordering::Greater,
            (Some(x), Some(y)) => {
                let order = match (x.parse::<u64>(), y.parse::<u64>()) {
                    (Ok(x), Ok(y)) => x.cmp(&y),
                    (Ok(_), Err(_)) => std::cmp::Ordering::Less,
                    (Err(_), Ok(_)) => std::cmp::Ordering::Greater,
                    (Err(_), Err(_)) => x.cmp(y),
                };
                if order != std::cmp::Ordering::Equal {
                    return order;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::{Arguments, ToolFuture, ToolHandler};

    struct Nothing;

    impl ToolHandler for Nothing {
        fn call(&self, _: Arguments, _: crate::RequestContext) -> ToolFuture {
            Box::pin(async { Ok(crate::model::CallToolResult::text("")) })
        }
    }

    fn named(name: &str) -> Tool {
        Tool::from_handler(name, "", serde_json::json!({"type": "object"}), Nothing)
    }

    fn prompt(name: &str, arguments: &[&str]) -> Prompt {
        let mut prompt = Prompt::new(name, "", |_, _| async {
            Ok(crate::model::GetPromptResult::default())
        });
        for argument in arguments {
            prompt = prompt.argument(crate::PromptArgument::required(*argument, ""));
        }
        prompt
    }

    #[test]
    fn names_clients_cannot_use_are_refused_at_registration() {
        let registry = Registry::default();
        for name in ["", "new\nline", "tab\there", &"x".repeat(129)] {
            let refused = registry.add_tool(named(name));
            assert!(
                matches!(refused, Err(RegistryError::Invalid { kind: "tool", .. })),
                "{name:?}: {refused:?}"
            );
            let refused = registry.add_prompt(prompt(name, &[]));
            assert!(
                matches!(refused, Err(RegistryError::Invalid { kind: "prompt", .. })),
                "{name:?}: {refused:?}"
            );
        }
        // At the bound, and with what the spec advises against but clients take: accepted.
        for name in [&"x".repeat(128), "has space", "slash/name", "é"] {
            registry.add_tool(named(name)).expect("a usable name");
            registry
                .add_prompt(prompt(name, &[]))
                .expect("a usable name");
        }
    }

    #[test]
    fn a_prompt_argument_named_twice_is_refused() {
        let registry = Registry::default();
        let refused = registry.add_prompt(prompt("p", &["a", "b", "a"]));
        assert!(
            matches!(&refused, Err(RegistryError::Invalid { reason, .. }) if reason.contains("twice")),
            "{refused:?}"
        );
        registry
            .add_prompt(prompt("p", &["a", "b"]))
            .expect("distinct arguments");
    }

    #[test]
    fn a_template_variable_twice_or_an_empty_template_is_refused() {
        let registry = Registry::default();
        let template = |uri: &str| {
            crate::resource::ResourceTemplate::new(uri, "t", |_, _, _| async {
                Err(crate::resource::ResourceError::NotFound)
            })
        };
        for uri in ["file:///{a}/{a}", ""] {
            let refused = registry.add_resource_template(template(uri));
            assert!(
                matches!(refused, Err(RegistryError::InvalidTemplate(_))),
                "{uri:?}: {refused:?}"
            );
        }
        registry
            .add_resource_template(template("file:///{a}/{b}"))
            .expect("distinct variables");
    }

    /// An error quotes no more than the beginning of a long template (an upstream's may be
    /// as long as a message, and the error is logged).
    #[test]
    fn a_template_error_quotes_the_templates_beginning() {
        let long = format!("file:///{{a}}/{}/{{a}}", "x".repeat(10_000));
        let Err(reason) = crate::resource::UriTemplate::parse(&long) else {
            panic!("a variable named twice is refused");
        };
        assert!(reason.len() < 300, "{} bytes", reason.len());
        assert!(
            reason.contains("{a} twice in \"file:///{a}/xxx"),
            "{reason}"
        );
        assert!(reason.ends_with('…'), "{reason}");
    }

    /// A batch's tool named like a tool there of another version is refused, not merged in
    /// as a version of it: the batch's owner (an upstream) never counts the name as its own,
    /// and its next re-list removes nothing of the other's. (A versioned built-in took an
    /// upstream's tool as its version "1", and lost every version at its re-list; review
    /// 58 #5.)
    #[test]
    fn a_batch_never_adds_a_version_to_a_tool_there() {
        let registry = Registry::default();
        registry
            .add_tool(named("search").version("2"))
            .expect("added");
        let mut batch = Batch::default();
        batch.add_tool(named("search")).expect("usable");
        let refused: Vec<String> = registry.apply(batch).into_iter().map(|r| r.key).collect();
        assert_eq!(refused, ["search"]);
        let versions = registry
            .inner
            .tools
            .items
            .get("search")
            .map(|entry| entry.item.versions.to_vec());
        assert_eq!(versions, Some(vec![Arc::from("2")]));
        // The library's own registration still adds a version.
        registry.add_tool(named("search")).expect("a version added");
        assert_eq!(
            registry
                .inner
                .tools
                .items
                .get("search")
                .map(|e| e.item.versions.len()),
            Some(2)
        );
    }

    /// A batch of additions and removals is one rebuild of each kind it changes; a key taken
    /// (before, or earlier in the batch) is refused and named, the first keeping it. (A
    /// gateway's re-list was a rebuild and a notification per entry: attack run 52c G1.)
    #[test]
    fn a_batch_is_one_rebuild_per_kind_and_names_what_it_refused() {
        let registry = Registry::default();
        registry.add_tool(named("kept")).expect("added");
        registry.add_tool(named("gone")).expect("added");
        let tools = || registry.inner.tools.generation.load(Ordering::Relaxed);
        let prompts = || registry.inner.prompts.generation.load(Ordering::Relaxed);
        let (tools_before, prompts_before) = (tools(), prompts());
        let mut batch = Batch::default();
        batch.remove_tool("gone");
        for name in ["a", "b", "kept", "c"] {
            batch.add_tool(named(name)).expect("usable");
        }
        batch.add_tool(named("a")).expect("usable");
        let refused: Vec<String> = registry.apply(batch).into_iter().map(|r| r.key).collect();
        assert_eq!(refused, ["kept", "a"]);
        assert_eq!(tools(), tools_before + 1, "one rebuild");
        assert_eq!(prompts(), prompts_before, "prompts untouched");
        let mut listed: Vec<String> = registry
            .inner
            .tools
            .items
            .iter()
            .map(|e| e.key().clone())
            .collect();
        listed.sort();
        assert_eq!(listed, ["a", "b", "c", "kept"]);
    }

    /// Version `version` of tool `t`, its argument `region` mirrored in a header or not.
    fn t(version: &str, mirrored: bool) -> Tool {
        let mut region = serde_json::json!({"type": "string"});
        if mirrored {
            region["x-mcp-header"] = "Region".into();
        }
        let schema = serde_json::json!({"type": "object", "properties": {"region": region}});
        Tool::from_handler("t", "", schema, Nothing).version(version)
    }

    /// Gives the identity `someone` a view (an upstream's) hiding the registered `t` and
    /// showing `shown` in its place.
    fn view_t_as(registry: &Registry, shown: Vec<Tool>) {
        registry.update_view(
            &Viewer::Identity(Arc::from("someone")),
            "upstream",
            |view| {
                let hidden = std::iter::once("t".to_owned()).collect();
                view.tools = Some(Registry::tool_view(hidden, shown));
                Changes::TOOLS
            },
        );
    }

    struct First;

    impl VersionChooser for First {
        fn choose(&self, _: &str, _: &[Arc<str>]) -> usize {
            0
        }
    }

    /// A session's tool cache serves two viewers (the session, and its identity for the
    /// 2026-07-28 requests of the same connection): a tool the session's view shows is not
    /// taken from the cache for the identity, whose view hides it. (It was: the cache was
    /// keyed by name alone.)
    #[test]
    fn a_tool_found_through_one_viewer_is_not_cached_for_the_other() {
        let registry = Registry::default();
        registry.add_tool(t("1", false)).expect("added");
        view_t_as(&registry, Vec::new());
        let cache = ToolCache::default();
        let session = ViewerRef::Session(7);
        let identity = ViewerRef::Identity("someone");
        assert!(registry
            .cached_tool_handler("t", &First, session, &cache)
            .is_ok());
        assert!(
            registry
                .cached_tool_handler("t", &First, identity, &cache)
                .is_err(),
            "hidden from the identity"
        );
        assert!(registry
            .cached_tool_handler("t", &First, session, &cache)
            .is_ok());
    }

    struct Last;

    impl VersionChooser for Last {
        fn choose(&self, _: &str, versions: &[Arc<str>]) -> usize {
            versions.len() - 1
        }
    }

    /// A call is checked against the headers of the version its caller sees, as versions
    /// come and go. (It was checked against the highest version's, whichever it ran.)
    #[test]
    fn a_tools_header_params_are_those_of_the_version_its_caller_sees() {
        let registry = Registry::default();
        let session = ViewerRef::Session(7);
        let mirrored = |r: &Registry, chooser: &dyn VersionChooser| {
            r.tool_header_params("t", chooser, session).map(|p| p.len())
        };
        registry.add_tool(t("1", true)).expect("added");
        assert_eq!(mirrored(&registry, &First), Some(1));
        registry.add_tool(t("2", false)).expect("added");
        assert_eq!(
            mirrored(&registry, &First),
            Some(1),
            "version 1 still mirrors"
        );
        assert_eq!(
            mirrored(&registry, &Last),
            None,
            "version 2 mirrors nothing"
        );
        assert!(registry.remove_tool_version("t", "2"));
        assert_eq!(mirrored(&registry, &Last), Some(1));
        registry.add_tool(t("2", false)).expect("added");
        assert!(registry.remove_tool_version("t", "1"));
        assert_eq!(mirrored(&registry, &First), None);
        assert!(registry.remove_tool_version("t", "2"));
        assert_eq!(mirrored(&registry, &First), None);
    }

    /// An identity whose view shows its own `t` (a gateway child's) is checked against that
    /// tool's headers, other viewers against the registered one's.
    #[test]
    fn a_viewed_tools_header_params_are_the_views() {
        let registry = Registry::default();
        registry.add_tool(t("1", false)).expect("added");
        view_t_as(&registry, vec![t("1", true)]);
        let mirrored = |viewer| {
            registry
                .tool_header_params("t", &First, viewer)
                .map(|p| p.len())
        };
        assert_eq!(mirrored(ViewerRef::Identity("someone")), Some(1));
        assert_eq!(mirrored(ViewerRef::Identity("someone else")), None);
        assert_eq!(mirrored(ViewerRef::Session(7)), None);
    }
}
