//! The gateway: other MCP servers (`[[upstreams]]`: stdio programs, Streamable HTTP or
//! WebSocket endpoints) served through this one, so many clients reach them over WebSocket
//! and Streamable HTTP, in both protocol eras, behind one perimeter and one set of limits.
//!
//! At start each upstream is started once and asked for its tools, resources, templates and
//! prompts, which are registered as this server's (tool and prompt names prefixed; resource
//! URIs as they are). A request for one of them runs in a worker like any other and is
//! forwarded by [`upstream::Upstream::forward`] to the child that serves the session: its
//! own (`per_session`) or the one everybody shares (`shared`). A shared child's
//! `list_changed` re-lists it and updates the registry, which tells every session once; its
//! `resources/updated` reaches the sessions subscribed to the URI.
//!
//! A session's own child is listed when it starts and after each of its `list_changed`:
//! where it offers something else than the upstream registered at start (it runs for one
//! client, `env_from_identity`), the session gets a view of its own in the registry (the
//! child's entries in place of the upstream's), and that session alone is told.
//!
//! A session's own child (`per_session`) runs on the worker thread that serves the session:
//! its calls cross no thread. Shared children (and the children started at discovery) run on
//! a thread of the gateway's own (a single-threaded runtime), which every worker reaches
//! alike. Either way the kernel's parent-death signal of each child is tied to a thread that
//! lives as long as the server.

mod proxy;
mod upstream;

use crate::config::{Settings, UpstreamMode, UpstreamStart};
use crate::mailbox::inbox::Changes;
use crate::observe::metrics::UpstreamMetrics;
use crate::perimeter::Refusal;
use crate::registry::{Batch, KindView, ListKind, OwnerView, Registry, Viewer};
use crate::session::shared::SessionObserver;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use upstream::{Environment, Upstream};

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// An upstream could not be started, or did not answer as an MCP server.
    #[error("upstreams.{name}: {reason}")]
    Upstream {
        /// The upstream's name.
        name: String,
        /// What went wrong.
        reason: String,
    },
    /// The gateway's thread could not be started.
    #[error("the gateway thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// The running upstreams; dropping it stops their children (see [`Gateway::stop`]).
pub(crate) struct Gateway {
    upstreams: Vec<Arc<Upstream>>,
    runtime: Handle,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// What children get between SIGTERM and SIGKILL when the server stops.
    grace: Duration,
}

/// What this upstream registered, by name or URI, with the definition it listed: to update
/// on `list_changed`.
#[derive(Default)]
pub(crate) struct Listed {
    tools: std::collections::HashMap<String, Value>,
    resources: std::collections::HashMap<String, Value>,
    templates: std::collections::HashMap<String, Value>,
    prompts: std::collections::HashMap<String, Value>,
}

impl Gateway {
    /// Starts every upstream of `settings` and registers what each offers in `registry`;
    /// `alone` says nothing else is served (a single upstream then keeps its names as they
    /// are). `None` without upstreams.
    ///
    /// # Errors
    /// [`GatewayError::Upstream`] naming the first upstream that cannot be started or does not
    /// complete its `initialize`.
    pub(crate) fn start(
        settings: &Settings,
        registry: &Registry,
        alone: bool,
    ) -> Result<Option<Self>, GatewayError> {
        if settings.upstreams.is_empty() {
            return Ok(None);
        }
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("mcp-ws-gateway".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        let _ = handle_tx.send(Err(error));
                        return;
                    }
                };
                let _ = handle_tx.send(Ok(runtime.handle().clone()));
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })?;
        let runtime = handle_rx
            .recv()
            .map_err(|_| std::io::Error::other("the gateway thread ended"))??;
        let environment = Environment {
            runtime: runtime.clone(),
            registry: registry.clone(),
            max_message_bytes: settings.limits.max_message_bytes,
            client_name: settings.info.name.clone(),
        };
        let alone = alone && settings.upstreams.len() == 1;
        let mut gateway = Self {
            upstreams: Vec::new(),
            runtime: runtime.clone(),
            stop: Some(stop),
            thread: Some(thread),
            grace: Duration::from_millis(settings.shutdown.grace_ms),
        };
        for upstream_settings in &settings.upstreams {
            let prefix = upstream_settings.prefix.clone().unwrap_or_else(|| {
                if alone {
                    String::new()
                } else {
                    format!("{}__", upstream_settings.name)
                }
            });
            let upstream = Upstream::new(upstream_settings.clone(), prefix, environment.clone());
            gateway.upstreams.push(upstream.clone());
            let offers = run_blocking(&runtime, discover(upstream.clone())).map_err(|reason| {
                GatewayError::Upstream {
                    name: upstream_settings.name.clone(),
                    reason,
                }
            })?;
            register(&upstream, offers);
            if let Some(child) = run_blocking(&runtime, {
                let upstream = upstream.clone();
                async move { upstream.shared_child().await }
            }) {
                upstream.subscribe_all(&child.client, None);
            }
            let listed = crate::lock(&upstream.listed);
            tracing::info!(
                upstream = %upstream.name,
                mode = ?upstream_settings.mode,
                prefix = %upstream.prefix,
                tools = listed.tools.len(),
                resources = listed.resources.len() + listed.templates.len(),
                prompts = listed.prompts.len(),
                "upstream ready"
            );
        }
        let reaped: Vec<Arc<Upstream>> = gateway.upstreams.clone();
        runtime.spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(5));
            loop {
                every.tick().await;
                reaped.iter().for_each(|u| u.reap_idle());
            }
        });
        Ok(Some(gateway))
    }

    /// What starts the sessions' own children at their `initialize` (`per_session`
    /// upstreams with `start = "initialize"`), if any upstream wants that.
    pub(crate) fn session_observer(&self) -> Option<Arc<dyn SessionObserver>> {
        let starting: Vec<Arc<Upstream>> = self
            .upstreams
            .iter()
            .filter(|u| {
                u.settings.mode == UpstreamMode::PerSession
                    && u.settings.start == UpstreamStart::Initialize
            })
            .cloned()
            .collect();
        (!starting.is_empty()).then(|| Arc::new(StartAtInitialize(starting)) as _)
    }

    /// The metrics of each upstream, by name.
    pub(crate) fn metrics(&self) -> Vec<(Arc<str>, Arc<UpstreamMetrics>)> {
        self.upstreams
            .iter()
            .map(|u| (u.name.clone(), u.metrics.clone()))
            .collect()
    }

    /// Stops every child (SIGTERM, then SIGKILL after the shutdown grace) and the gateway's
    /// thread.
    pub(crate) fn stop(&mut self) {
        let upstreams = std::mem::take(&mut self.upstreams);
        if !upstreams.is_empty() {
            let grace = self.grace;
            run_blocking(&self.runtime, async move {
                futures_util::future::join_all(upstreams.iter().map(|u| u.stop(grace))).await;
            });
        }
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts a session's own child of each of these upstreams when the session completes its
/// `initialize`.
struct StartAtInitialize(Vec<Arc<Upstream>>);

impl SessionObserver for StartAtInitialize {
    fn initialized(&self, session: &crate::context::SessionInfo) {
        // On the session's own thread, where its children live; the `initialize` answer
        // does not wait. A child that cannot start is logged and backs off as at first use.
        let Ok(here) = Handle::try_current() else {
            return;
        };
        for upstream in &self.0 {
            let upstream = upstream.clone();
            let session = session.clone();
            here.spawn(async move {
                let _ = upstream.child_for(&session).await;
            });
        }
    }

    fn admits(&self) -> Result<(), Refusal> {
        match self.0.iter().find(|u| u.is_full()) {
            Some(full) => Err(Refusal::UpstreamFull {
                upstream: full.name.to_string(),
                limit: full.settings.max_children,
            }),
            None => Ok(()),
        }
    }
}

/// Runs `work` on the gateway's runtime and waits for it on this thread.
fn run_blocking<T: Send + 'static>(
    runtime: &Handle,
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> T
where
{
    let (done, wait) = std::sync::mpsc::sync_channel(1);
    runtime.spawn(async move {
        let _ = done.send(work.await);
    });
    match wait.recv() {
        Ok(value) => value,
        // The runtime is gone: only while the process exits.
        Err(_) => std::process::abort(),
    }
}

/// What an upstream offers, of the kinds listed (`None`: not listed).
#[derive(Default)]
struct Offers {
    tools: Option<Vec<Value>>,
    /// Resources and templates.
    resources: Option<(Vec<Value>, Vec<Value>)>,
    prompts: Option<Vec<Value>>,
}

/// Starts the upstream once and lists what it offers; keeps that child as the shared one, or
/// stops it (per-session upstreams start one per session).
async fn discover(upstream: Arc<Upstream>) -> Result<Offers, String> {
    let child = upstream
        .start_child(None, None)
        .await
        .map_err(|e| e.to_string())?;
    let capabilities = child.client.server().capabilities.clone();
    upstream.completions.store(
        capabilities.get("completions").is_some(),
        std::sync::atomic::Ordering::Relaxed,
    );
    let offers = list(&upstream, &child.client, &capabilities, Changes::ALL).await;
    match upstream.settings.mode {
        UpstreamMode::Shared => upstream.adopt_shared(child).await,
        UpstreamMode::PerSession => child.client.shutdown(Duration::from_secs(2)).await,
    }
    offers
}

/// Lists what `client` offers (the kinds of `kinds`; a kind the server does not declare is
/// not listed), within the upstream's `initialize_timeout_ms`: a child that never answers a
/// list holds up neither the gateway's start nor (re-lists being one at a time) the other
/// sessions' re-lists.
async fn list(
    upstream: &Upstream,
    client: &crate::client::Client,
    capabilities: &Value,
    kinds: Changes,
) -> Result<Offers, String> {
    let limit = Duration::from_millis(upstream.settings.initialize_timeout_ms);
    match tokio::time::timeout(limit, list_within(client, capabilities, kinds)).await {
        Ok(listed) => listed,
        Err(_) => Err(format!(
            "no list within {} ms (initialize_timeout_ms)",
            limit.as_millis()
        )),
    }
}

/// [`list`], however long it takes.
async fn list_within(
    client: &crate::client::Client,
    capabilities: &Value,
    kinds: Changes,
) -> Result<Offers, String> {
    let wanted = |kind: &str| {
        capabilities.get(kind).is_some() && Changes::named(kind).is_some_and(|k| kinds.contains(k))
    };
    let fail = |what: &str, e: crate::client::ClientError| format!("{what}: {e}");
    let mut offers = Offers::default();
    if wanted("tools") {
        let tools = client.list_all("tools/list", "tools").await;
        offers.tools = Some(tools.map_err(|e| fail("tools/list", e))?);
    }
    if wanted("resources") {
        let resources = client.list_all("resources/list", "resources").await;
        let resources = resources.map_err(|e| fail("resources/list", e))?;
        // Templates are optional even for servers with resources.
        let templates = client
            .list_all("resources/templates/list", "resourceTemplates")
            .await
            .unwrap_or_default();
        offers.resources = Some((resources, templates));
    }
    if wanted("prompts") {
        let prompts = client.list_all("prompts/list", "prompts").await;
        offers.prompts = Some(prompts.map_err(|e| fail("prompts/list", e))?);
    }
    Ok(offers)
}

/// Lists a child again (the kinds it said changed; every kind when a session's own child
/// starts) and brings what it offers to whoever sees that child: the registry (a shared
/// child: every session), or a session's view (`viewer`: its own child). One re-list at a
/// time per child: another session's child slow to answer holds up no other's.
pub(crate) async fn relist(
    upstream: Arc<Upstream>,
    child: crate::client::Client,
    kinds: Changes,
    viewer: Option<Viewer>,
) {
    // A session's child gone meanwhile: its view is gone too (`unshow`).
    let Some(relisting) = upstream.relisting(viewer.as_ref()) else {
        return;
    };
    let _one = relisting.lock().await;
    let capabilities = child.server().capabilities.clone();
    match list(&upstream, &child, &capabilities, kinds).await {
        Ok(offers) => match &viewer {
            None => register(&upstream, offers),
            Some(viewer) => show(&upstream, viewer, offers),
        },
        Err(error) => tracing::warn!(upstream = %upstream.name, %error, "re-listing failed"),
    }
}

/// Shows `viewer` what its own child offers (the kinds listed in `offers`) in place of what
/// the upstream registered at start, where they differ: a kind the child lists as
/// registered needs no view. Tells the viewer's sessions of each kind whose view came,
/// changed or went.
fn show(upstream: &Arc<Upstream>, viewer: &Viewer, offers: Offers) {
    let registered = crate::lock(&upstream.listed);
    let tools = offers.tools.map(|tools| {
        let admitted = tools
            .into_iter()
            .filter(|definition| upstream.settings.tools.admits(tool_name(definition)));
        part(
            upstream,
            ListKind::Tools,
            &registered.tools,
            admitted,
            |definition| {
                proxy::tool(upstream, definition).map(|(_, tool)| (tool.name().to_owned(), tool))
            },
        )
        .map(|(hidden, tools)| Registry::tool_view(hidden, tools))
    });
    let resources = offers.resources.map(|(resources, templates)| {
        let fixed = part(
            upstream,
            ListKind::Resources,
            &registered.resources,
            resources.into_iter(),
            |definition| proxy::resource(upstream, definition).map(|r| (r.uri().to_owned(), r)),
        );
        let template = |definition: &Value| {
            let template = proxy::template(upstream, definition)?;
            // Left out as registration leaves it out (review 54 #4: listed to the session,
            // it matched no read).
            if let Err(reason) = &template.template {
                tracing::warn!(upstream = %upstream.name, %reason, "a resource template of a view left out");
                return None;
            }
            Some((template.uri_template().to_owned(), template))
        };
        let templated = part(
            upstream,
            ListKind::ResourceTemplates,
            &registered.templates,
            templates.into_iter(),
            template,
        );
        (
            fixed.map(|(hidden, shown)| KindView::new(hidden, shown)),
            templated.map(|(hidden, shown)| KindView::new(hidden, shown)),
        )
    });
    let prompts = offers.prompts.map(|prompts| {
        let prompt = |definition: &Value| {
            let prompt = proxy::prompt(upstream, definition)?;
            if let Err(error) = crate::registry::check_prompt(&prompt) {
                tracing::warn!(upstream = %upstream.name, %error, "a prompt of a view left out");
                return None;
            }
            Some((prompt.name().to_owned(), prompt))
        };
        part(
            upstream,
            ListKind::Prompts,
            &registered.prompts,
            prompts.into_iter(),
            prompt,
        )
        .map(|(hidden, shown)| KindView::new(hidden, shown))
    });
    drop(registered);
    upstream
        .registry()
        .update_view(viewer, &upstream.name, |view| {
            let mut changed = Changes::default();
            // The session may have ended while its child was listed: its views are gone
            // (`unshow` runs after its slot is removed), and none may come back.
            if !upstream.serves(viewer) {
                *view = OwnerView::default();
                return changed;
            }
            let mut note = |had: bool, has: bool, kind: Changes| {
                if had || has {
                    changed = changed.union(kind);
                }
            };
            if let Some(tools) = tools {
                note(view.tools.is_some(), tools.is_some(), Changes::TOOLS);
                view.tools = tools;
            }
            if let Some((resources, templates)) = resources {
                let had = view.resources.is_some() || view.templates.is_some();
                note(
                    had,
                    resources.is_some() || templates.is_some(),
                    Changes::RESOURCES,
                );
                view.resources = resources;
                view.templates = templates;
            }
            if let Some(prompts) = prompts {
                note(view.prompts.is_some(), prompts.is_some(), Changes::PROMPTS);
                view.prompts = prompts;
            }
            changed
        });
}

/// Forgets `viewer`'s views of this upstream (its child is gone), telling its sessions of
/// the lists that change back.
pub(crate) fn unshow(upstream: &Upstream, viewer: &Viewer) {
    upstream
        .registry()
        .update_view(viewer, &upstream.name, |view| {
            let mut changed = Changes::default();
            for (had, kind) in [
                (view.tools.is_some(), Changes::TOOLS),
                (
                    view.resources.is_some() || view.templates.is_some(),
                    Changes::RESOURCES,
                ),
                (view.prompts.is_some(), Changes::PROMPTS),
            ] {
                if had {
                    changed = changed.union(kind);
                }
            }
            *view = OwnerView::default();
            changed
        });
}

/// One kind (`list`) of a child's view: `None` when its `definitions` (those `make`
/// accepts, by the key it gives) are exactly what the upstream registered; else the
/// registered keys to hide and the entries to show. An entry whose key the registry holds
/// for another owner (a built-in, another upstream) is left out, with a warning, as its
/// registration would be: the first keeps it (attack run 52c G4: the session's own child
/// took the calls of a built-in named alike).
///
/// Each definition is compared with the registered one of its key and dropped as soon as
/// its entry is made: a child's list is never held whole twice, as definitions and as
/// entries (a `serde_json::Value` takes 25 to 100 times its text, every object a B-tree
/// node of its own, and what is freed after a peak stays in the process).
fn part<T>(
    upstream: &Upstream,
    list: ListKind,
    registered: &std::collections::HashMap<String, Value>,
    definitions: impl Iterator<Item = Value>,
    make: impl Fn(&Value) -> Option<(String, T)>,
) -> Option<(std::collections::HashSet<String>, Vec<T>)> {
    let registry = upstream.registry();
    let mut keys = std::collections::HashSet::new();
    let mut same = true;
    let mut shown = Vec::new();
    for definition in definitions {
        if let Some((key, entry)) = make(&definition) {
            if !registered.contains_key(&key) && registry.holds(list, &key) {
                // Its first 64 characters: an upstream's key may be as long as a message.
                let key: String = key.chars().take(64).collect();
                let kind = list.member();
                tracing::warn!(upstream = %upstream.name, kind, %key, "left out of a view: taken");
                continue;
            }
            same &= registered.get(&key) == Some(&definition);
            keys.insert(key);
            shown.push(entry);
        }
    }
    let same = same && keys.len() == registered.len();
    (!same).then(|| (registered.keys().cloned().collect(), shown))
}

/// A tool definition's name (empty when it has none).
fn tool_name(definition: &Value) -> &str {
    definition
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Registers `offers` (the kinds listed in it) in place of what the upstream registered of
/// those kinds before, touching only what changed: an entry whose definition is the same
/// stays registered throughout (a call of it never sees it missing). A name or URI another
/// upstream (or the server) holds already, or one registration refuses, is skipped, with a
/// warning saying why. Every change is one [`Batch`] of the registry's: one list snapshot
/// per kind, and each session told once per list that changed, however many entries came
/// and went (attack run 52c G1: one at a time, replacing 8,000 tools held the gateway's
/// thread for a minute and told every session 12,000 times).
fn register(upstream: &Arc<Upstream>, offers: Offers) {
    let registry = upstream.registry();
    let mut guard = crate::lock(&upstream.listed);
    let listed = &mut *guard;
    let mut batch = Batch::default();
    let mut now = Listed::default();
    if let Some(tools) = offers.tools {
        let admitted = tools
            .into_iter()
            .filter(|definition| upstream.settings.tools.admits(tool_name(definition)));
        now.tools = plan(
            upstream,
            (&mut batch, ListKind::Tools),
            &mut listed.tools,
            admitted,
            |definition| {
                let (_, tool) = proxy::tool(upstream, definition)?;
                Some((tool.name().to_owned(), Entry::Tool(tool)))
            },
        );
    }
    if let Some((resources, templates)) = offers.resources {
        now.resources = plan(
            upstream,
            (&mut batch, ListKind::Resources),
            &mut listed.resources,
            resources.into_iter(),
            |definition| {
                let resource = proxy::resource(upstream, definition)?;
                Some((resource.uri().to_owned(), Entry::Resource(resource)))
            },
        );
        now.templates = plan(
            upstream,
            (&mut batch, ListKind::ResourceTemplates),
            &mut listed.templates,
            templates.into_iter(),
            |definition| {
                let template = proxy::template(upstream, definition)?;
                Some((
                    template.uri_template().to_owned(),
                    Entry::Template(template),
                ))
            },
        );
    }
    if let Some(prompts) = offers.prompts {
        now.prompts = plan(
            upstream,
            (&mut batch, ListKind::Prompts),
            &mut listed.prompts,
            prompts.into_iter(),
            |definition| {
                let prompt = proxy::prompt(upstream, definition)?;
                Some((prompt.name().to_owned(), Entry::Prompt(prompt)))
            },
        );
    }
    for refused in registry.apply(batch) {
        // Its key taken by another upstream or the server: not this upstream's, so never
        // removed by its next re-list.
        let kind = match refused.list {
            ListKind::Tools => &mut now.tools,
            ListKind::Resources => &mut now.resources,
            ListKind::ResourceTemplates => &mut now.templates,
            ListKind::Prompts => &mut now.prompts,
        };
        kind.remove(&refused.key);
        tracing::warn!(upstream = %upstream.name, error = %refused.error, "skipped");
    }
    // A kind listed now was taken out of `listed` by `plan`: what is registered of it now
    // goes back; a kind not listed keeps what it had.
    for (mine, listing) in [
        (&mut listed.tools, now.tools),
        (&mut listed.resources, now.resources),
        (&mut listed.templates, now.templates),
        (&mut listed.prompts, now.prompts),
    ] {
        mine.extend(listing);
    }
}

/// One entry of an upstream's, made from its definition, to register.
enum Entry {
    Tool(crate::Tool),
    Resource(crate::resource::Resource),
    Template(crate::resource::ResourceTemplate),
    Prompt(crate::prompt::Prompt),
}

impl Entry {
    /// Adds this entry to `batch`, checked as its registration checks it.
    fn add_to(self, batch: &mut Batch) -> Result<(), crate::RegistryError> {
        match self {
            Self::Tool(tool) => batch.add_tool(tool),
            Self::Resource(resource) => batch.add_resource(resource),
            Self::Template(template) => batch.add_resource_template(template),
            Self::Prompt(prompt) => batch.add_prompt(prompt),
        }
    }
}

/// Removes the entry of kind `list` registered under `key` in `batch`.
fn remove_in(batch: &mut Batch, list: ListKind, key: &str) {
    match list {
        ListKind::Tools => batch.remove_tool(key),
        ListKind::Resources => batch.remove_resource(key),
        ListKind::ResourceTemplates => batch.remove_resource_template(key),
        ListKind::Prompts => batch.remove_prompt(key),
    }
}

/// Puts in `batch` (of kind `list`) what brings one kind of the registry from `listed`
/// (what the upstream registered, by key, with the definition it came from; taken, emptied)
/// to `definitions`; returns what will be registered then, less what the batch finds taken.
fn plan(
    upstream: &Upstream,
    (batch, list): (&mut Batch, ListKind),
    listed: &mut std::collections::HashMap<String, Value>,
    definitions: impl Iterator<Item = Value>,
    make: impl Fn(&Value) -> Option<(String, Entry)>,
) -> std::collections::HashMap<String, Value> {
    let mut before = std::mem::take(listed);
    let mut now = std::collections::HashMap::new();
    for definition in definitions {
        let Some((key, entry)) = make(&definition) else {
            continue;
        };
        if now.contains_key(&key) {
            // Listed twice: the first keeps it, as the registry would have it.
            // Its first 64 characters: an upstream's key may be as long as a message.
            let key: String = key.chars().take(64).collect();
            let kind = list.member();
            tracing::warn!(upstream = %upstream.name, kind, %key, "skipped: listed twice");
            continue;
        }
        match before.remove(&key) {
            Some(definition_before) if definition_before == definition => {
                now.insert(key, definition);
                continue;
            }
            Some(_) => remove_in(batch, list, &key),
            None => {}
        }
        match entry.add_to(batch) {
            Ok(()) => {
                now.insert(key, definition);
            }
            Err(error) => {
                // Refused (one clients cannot use): the error says which. The name as the
                // error quotes it: an upstream's may be as long as a message.
                tracing::warn!(upstream = %upstream.name, kind = list.member(), %error, "skipped");
            }
        }
    }
    // What the upstream no longer lists.
    for key in before.keys() {
        remove_in(batch, list, key);
    }
    now
}
