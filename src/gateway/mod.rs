//! The gateway: other MCP servers (`[[upstreams]]`: stdio programs, Streamable HTTP
//! endpoints) served through this one, so many clients reach them over WebSocket and
//! Streamable HTTP, in both protocol eras, behind one perimeter and one set of limits.
//!
//! At start each upstream is started once and asked for its tools, resources, templates and
//! prompts, which are registered as this server's (tool and prompt names prefixed; resource
//! URIs as they are). A request for one of them runs in a worker like any other and is
//! forwarded by [`upstream::Upstream::forward`] to the child that serves the session: its
//! own (`per_session`) or the one everybody shares (`shared`). The child's `list_changed`
//! re-lists it and updates the registry, which tells every session once; its
//! `resources/updated` reaches the sessions subscribed to the URI.
//!
//! Children run on a thread of the gateway's own (a single-threaded runtime): their pipes
//! are driven there whatever worker thread forwards to them, and the kernel's parent-death
//! signal of each child is tied to that thread, which lives as long as the server.

mod proxy;
mod upstream;

use crate::config::{Settings, UpstreamMode};
use crate::observe::metrics::UpstreamMetrics;
use crate::registry::Registry;
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

/// What this upstream registered, to replace it on `list_changed`.
#[derive(Default)]
pub(crate) struct Listed {
    tools: Vec<String>,
    resources: Vec<String>,
    templates: Vec<String>,
    prompts: Vec<String>,
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
                let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
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
        .start_child(None)
        .await
        .map_err(|e| e.to_string())?;
    let capabilities = child.client.server().capabilities.clone();
    upstream
        .completions
        .store(capabilities.get("completions").is_some(), std::sync::atomic::Ordering::Relaxed);
    let offers = list(&child.client, &capabilities, None).await;
    match upstream.settings.mode {
        UpstreamMode::Shared => upstream.adopt_shared(child).await,
        UpstreamMode::PerSession => child.client.shutdown(Duration::from_secs(2)).await,
    }
    offers
}

/// Lists what `client` offers (of one kind, or all); a kind the server does not declare is
/// not listed.
async fn list(
    client: &crate::client::Client,
    capabilities: &Value,
    only: Option<&str>,
) -> Result<Offers, String> {
    let wanted = |kind: &str| capabilities.get(kind).is_some() && only.is_none_or(|o| o == kind);
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

/// Lists one kind again after the upstream said it changed (`tools`, `resources`,
/// `prompts`), and registers the new list in place of the old: the registry tells the
/// sessions. One re-list at a time per upstream.
pub(crate) async fn relist(upstream: Arc<Upstream>, kind: String) {
    let _one = upstream.relisting.lock().await;
    let Some(child) = upstream.any_child().await else {
        return;
    };
    let capabilities = child.client.server().capabilities.clone();
    match list(&child.client, &capabilities, Some(&kind)).await {
        Ok(offers) => register(&upstream, offers),
        Err(error) => tracing::warn!(upstream = %upstream.name, %error, "re-listing failed"),
    }
}

/// Registers `offers` (the kinds listed in it) in place of what the upstream registered of
/// those kinds before. A name or URI another upstream (or the server) holds already is
/// skipped, with a warning naming both.
fn register(upstream: &Arc<Upstream>, offers: Offers) {
    let registry = upstream.registry();
    let mut listed = crate::lock(&upstream.listed);
    let collision = |kind: &str, name: &str, error: crate::RegistryError| {
        tracing::warn!(upstream = %upstream.name, kind, name, %error, "skipped: the name is taken");
    };
    if let Some(tools) = &offers.tools {
        for name in listed.tools.drain(..) {
            registry.remove_tool(&name);
        }
        for definition in tools {
            let Some((own_name, tool)) = proxy::tool(upstream, definition) else {
                continue;
            };
            if !upstream.settings.tools.admits(&own_name) {
                continue;
            }
            let name = tool.name().to_owned();
            match registry.add_tool(tool) {
                Ok(()) => listed.tools.push(name),
                Err(error) => collision("tool", &name, error),
            }
        }
    }
    if let Some((resources, templates)) = &offers.resources {
        for uri in listed.resources.drain(..) {
            registry.remove_resource(&uri);
        }
        for template in listed.templates.drain(..) {
            registry.remove_resource_template(&template);
        }
        for definition in resources {
            let Some(resource) = proxy::resource(upstream, definition) else {
                continue;
            };
            let uri = resource.uri().to_owned();
            match registry.add_resource(resource) {
                Ok(()) => listed.resources.push(uri),
                Err(error) => collision("resource", &uri, error),
            }
        }
        for definition in templates {
            let Some(template) = proxy::template(upstream, definition) else {
                continue;
            };
            let uri = template.uri_template().to_owned();
            match registry.add_resource_template(template) {
                Ok(()) => listed.templates.push(uri),
                Err(error) => collision("resource template", &uri, error),
            }
        }
    }
    if let Some(prompts) = &offers.prompts {
        for name in listed.prompts.drain(..) {
            registry.remove_prompt(&name);
        }
        for definition in prompts {
            let Some(prompt) = proxy::prompt(upstream, definition) else {
                continue;
            };
            let name = prompt.name().to_owned();
            match registry.add_prompt(prompt) {
                Ok(()) => listed.prompts.push(name),
                Err(error) => collision("prompt", &name, error),
            }
        }
    }
}
