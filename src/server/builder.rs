//! Building a server: [`ServerBuilder`] gathers the settings, how the server presents itself
//! and what it offers; [`Server`] runs it in the foreground or on a thread of its own.

use super::run::{serve, termination_signal, Companions, RunningServer};
use super::Error;
use crate::config::Settings;
use crate::perimeter::Perimeter;
use crate::prompt::Prompt;
use crate::registry::Registry;
use crate::resource::{Resource, ResourceTemplate};
use crate::session::shared::Shared;
use crate::tool::Tool;
use std::net::SocketAddr;
use std::sync::Arc;

/// Builds a [`Server`]: settings, how it presents itself, and what it offers.
///
/// ```no_run
/// use mcp_ws::{Server, Tool, ToolError, RequestContext};
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Add { a: f64, b: f64 }
/// async fn add(args: Add, _ctx: RequestContext) -> Result<String, ToolError> {
///     Ok((args.a + args.b).to_string())
/// }
/// fn main() -> Result<(), mcp_ws::Error> {
///     Server::builder()
///         .name("calculator")
///         .tool(Tool::new("add", "Adds two numbers", add))
///         .build()?
///         .run()
/// }
/// ```
#[derive(Default)]
pub struct ServerBuilder {
    settings: Settings,
    /// The registry the server will have: handed out before `build`, so that a tool can
    /// change what the server offers while it runs (an admin tool, say).
    registry: Registry,
    tools: Vec<Tool>,
    resources: Vec<Resource>,
    templates: Vec<ResourceTemplate>,
    prompts: Vec<Prompt>,
}

/// The shortest `mrtr.state_key_file` secret taken, in characters once trimmed: 128 bits
/// of hex.
const MIN_STATE_KEY_BYTES: usize = 32;
impl ServerBuilder {
    /// Uses these settings (default: [`Settings::default`], listening on 127.0.0.1:8765).
    /// Set the name, version, title and instructions after this call, or in `settings.info`.
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// Sets `serverInfo.name`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.settings.info.name = name.into();
        self
    }

    /// Sets `serverInfo.version` (default: this crate's version).
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.settings.info.version = version.into();
        self
    }

    /// Sets `serverInfo.title`.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.settings.info.title = title.into();
        self
    }

    /// Sets the `instructions` the model gets at `initialize`.
    pub fn instructions(mut self, instructions: impl Into<String>) -> Self {
        self.settings.info.instructions = instructions.into();
        self
    }

    /// Sets the listen address.
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.settings.server.listen = addr;
        self
    }

    /// The registry the built server will use (a handle: clones share it). A tool that
    /// captures it can add, remove, enable or disable tools, resources and prompts while
    /// the server runs; connected clients hear of each change.
    ///
    /// ```
    /// use mcp_ws::{Server, Tool, ToolError, RequestContext};
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Name { name: String }
    /// let builder = Server::builder();
    /// let registry = builder.registry();
    /// let retire = Tool::new("retire", "Removes a tool", move |args: Name, _ctx: RequestContext| {
    ///     let registry = registry.clone();
    ///     async move { Ok::<_, ToolError>(registry.remove_tool(&args.name).to_string()) }
    /// });
    /// let server = builder.tool(retire).build().unwrap();
    /// # let _ = server;
    /// ```
    pub fn registry(&self) -> Registry {
        self.registry.clone()
    }

    /// Offers a tool.
    pub fn tool(mut self, tool: Tool) -> Self {
        self.tools.push(tool);
        self
    }

    /// Offers a resource.
    pub fn resource(mut self, resource: Resource) -> Self {
        self.resources.push(resource);
        self
    }

    /// Offers resources through a URI template.
    pub fn resource_template(mut self, template: ResourceTemplate) -> Self {
        self.templates.push(template);
        self
    }

    /// Offers a prompt.
    pub fn prompt(mut self, prompt: Prompt) -> Self {
        self.prompts.push(prompt);
        self
    }

    /// The server, ready to run.
    ///
    /// # Errors
    /// [`Error::Config`] for invalid settings (or a TLS or JWT key file that cannot be read
    /// or used), [`Error::Registry`] when two tools (or
    /// resources, templates, prompts) share a name, or a template is invalid,
    /// [`Error::ResourceDirectory`] when a directory of `resources.directories` cannot be
    /// served.
    pub fn build(self) -> Result<Server, Error> {
        self.settings.validate()?;
        let limits = &self.settings.limits;
        if limits.max_batch_len > limits.max_in_flight_per_session {
            // Not an error: a batch may mix calls with requests that run no worker (pings,
            // lists), and configurations that started before still start.
            tracing::warn!(
                max_batch_len = limits.max_batch_len,
                max_in_flight_per_session = limits.max_in_flight_per_session,
                "a batch of more tools/call entries than limits.max_in_flight_per_session \
                 gets -32009 for those beyond it; lower limits.max_batch_len to match"
            );
        }
        let perimeter = Perimeter::new(&self.settings)?;
        let mrtr = &self.settings.mrtr;
        let secret = match &mrtr.state_key_file {
            Some(path) => {
                let secret = std::fs::read_to_string(path).map_err(|source| {
                    crate::config::ConfigError::Read {
                        path: path.clone(),
                        source,
                    }
                })?;
                // An empty file (one not written yet) would key every node's states with a
                // key anyone can compute.
                if secret.trim().len() < MIN_STATE_KEY_BYTES {
                    return Err(crate::config::ConfigError::Invalid(format!(
                        "mrtr.state_key_file {} holds fewer than {MIN_STATE_KEY_BYTES} \
                         characters (e.g. `openssl rand -hex 32 > FILE`)",
                        path.display()
                    ))
                    .into());
                }
                Some(secret)
            }
            None => None,
        };
        // Without a file, the nodes sharing a Redis share one secret, made by the first:
        // a request state one node issued is accepted by every other.
        let mut shared_secret = None;
        let secret = match secret {
            Some(secret) => Some(secret),
            None if !self.settings.redis.url.is_empty() => {
                let candidate = crate::random_id().to_string() + &crate::random_id();
                match crate::cluster::store::shared_secret(&self.settings.redis, &candidate) {
                    // One written by something else that is too short to be a secret (an
                    // empty one would make every request state forgeable) is not used.
                    Some(shared) if shared.secret.trim().len() < MIN_STATE_KEY_BYTES => {
                        tracing::warn!(
                            "the multi round-trip secret in Redis holds fewer than \
                             {MIN_STATE_KEY_BYTES} bytes: not used; this node's states are \
                             its own"
                        );
                        None
                    }
                    Some(shared) => {
                        let secret = shared.secret.clone();
                        shared_secret = Some(shared);
                        Some(secret)
                    }
                    None => {
                        tracing::warn!(
                            "Redis unreachable at start: this node's multi round-trip states \
                             are its own (set mrtr.state_key_file to share them without Redis)"
                        );
                        None
                    }
                }
            }
            None => None,
        };
        let state_key = crate::protocol::mrtr::StateKey::new(
            secret.as_deref().map(str::trim),
            std::time::Duration::from_millis(mrtr.state_ttl_ms),
        );
        let registry = self.registry;
        for tool in self.tools {
            registry.add_tool(tool)?;
        }
        for resource in self.resources {
            registry.add_resource(resource)?;
        }
        for template in self.templates {
            registry.add_resource_template(template)?;
        }
        for prompt in self.prompts {
            registry.add_prompt(prompt)?;
        }
        let files = crate::registry::files::serve_directories(
            &registry,
            &self.settings.resources,
            self.settings.limits.max_message_bytes,
        )?;
        // A single upstream alone keeps its names; beside anything else they are prefixed.
        let offers = registry.offers();
        let alone = !(offers.tools || offers.resources || offers.prompts);
        let gateway = crate::gateway::Gateway::start(&self.settings, &registry, alone)?;
        let shared = Shared::new(self.settings, registry, state_key, perimeter);
        if let Some(secret) = shared_secret {
            let _ = shared.cluster.shared_secret.set(secret);
        }
        if let Some(gateway) = &gateway {
            let _ = shared.metrics.upstreams.set(gateway.metrics());
            if let Some(observer) = gateway.session_observer() {
                shared.observe_sessions(observer);
            }
        }
        Ok(Server {
            shared,
            companions: Companions { files, gateway },
        })
    }
}

/// An MCP server, built and not yet running; see [`ServerBuilder`].
pub struct Server {
    shared: Arc<Shared>,
    companions: Companions,
}

impl Server {
    /// Starts building a server.
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// What the server offers; changes reach connected clients as `list_changed`.
    pub fn registry(&self) -> &Registry {
        &self.shared.registry
    }

    /// The server's shared state (tests host sessions without a socket with it).
    #[cfg(feature = "testing")]
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Runs in the foreground until SIGINT or SIGTERM, then shuts down gracefully.
    ///
    /// # Errors
    /// [`Error::Bind`] when the address cannot be bound, [`Error::Io`] when serving fails.
    pub fn run(self) -> Result<(), Error> {
        let _companions = self.companions;
        let (bound_tx, bound_rx) = std::sync::mpsc::channel();
        let result =
            actix_rt::System::new().block_on(serve(self.shared, bound_tx, termination_signal()));
        match bound_rx.try_recv() {
            Ok(Err((addr, source))) => Err(Error::Bind { addr, source }),
            _ => result.map_err(Error::Io),
        }
    }

    /// Runs on a background thread; returns once the address is bound.
    ///
    /// # Errors
    /// [`Error::Bind`] when the address cannot be bound.
    pub fn spawn(self) -> Result<RunningServer, Error> {
        RunningServer::start(self.shared, self.companions)
    }
}
