//! One upstream: its children (one shared, or one per session), started on demand and
//! again after they end (with backoff), its limits, and the forwarding of one request with
//! everything that crosses during it (progress, log lines, the upstream's requests to the
//! client, the client's cancel).

use crate::client::{Call, Client, ClientError, ClientHandler, ClientOptions, StdioCommand};
use crate::config::{UpstreamMode, UpstreamSettings};
use crate::context::{RequestContext, SessionInfo};
use crate::mailbox::inbox::Changes;
use crate::model::{LogLevel, RpcError};
use crate::observe::metrics::UpstreamMetrics;
use crate::registry::{Registry, Viewer};
use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot};

/// The code of every error that says an upstream could not serve a request (its process
/// exited or cannot start, or it is over its limits); `data.upstream` names it, and the
/// request may be retried.
pub const UPSTREAM_UNAVAILABLE: i64 = -32030;

/// How long a child ended with its session gets between SIGTERM and SIGKILL.
const SESSION_END_GRACE: Duration = Duration::from_secs(2);
/// Longest wait between restarts of a child that keeps failing.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// The first pause before a stateless upstream's listen stream is opened again.
const LISTEN_PAUSE: Duration = Duration::from_millis(500);
/// A child that lived this long before it ended was not failing: its restart waits not.
const HEALTHY_AFTER: Duration = Duration::from_secs(10);
/// Resources of one upstream the gateway subscribes a child to, at most.
const MAX_SUBSCRIBED: usize = 256;
/// Events of one call waiting to be handled (log lines beyond are dropped; asks beyond are
/// refused to the upstream).
const CALL_EVENTS: usize = 64;

/// What the gateway knows of the server it runs in.
#[derive(Clone)]
pub(crate) struct Environment {
    /// Where children run (their pipes are driven there).
    pub runtime: Handle,
    pub registry: Registry,
    pub max_message_bytes: usize,
    /// What `Client` tells the upstream of itself.
    pub client_name: String,
}

/// A child, or the place of one.
#[derive(Default)]
struct Slot {
    child: tokio::sync::Mutex<Option<Child>>,
    /// Re-lists of its child run one at a time (each child's own: a child slow to answer
    /// holds up no other session's).
    relisting: Arc<tokio::sync::Mutex<()>>,
    /// Restarts of this slot's child after it ended quickly wait longer each time.
    backoff: Mutex<Backoff>,
    /// When a request last used it (ms since the gateway started), for idle reaping.
    last_used: AtomicU64,
}

/// A running child and the calls in flight on it.
#[derive(Clone)]
pub(crate) struct Child {
    pub client: Client,
    calls: Arc<Calls>,
    started: Instant,
    /// The log level last passed on to it (`NO_LEVEL`: none yet).
    level_sent: Arc<AtomicU8>,
}

/// No level passed on to a child yet.
const NO_LEVEL: u8 = u8::MAX;

/// The calls in flight on one child, for routing what the child sends that belongs to a
/// call but does not say which (log lines, requests to the client).
#[derive(Default)]
struct Calls {
    /// By the upstream's count of calls: in the order their requests came.
    by_id: Mutex<std::collections::BTreeMap<u64, CallLink>>,
}

struct CallLink {
    events: mpsc::Sender<CallEvent>,
    /// The session the call came from (`None`: a 2026-07-28 request, a session of its own).
    session: Option<u64>,
}

/// What reaches a call from its child besides progress.
enum CallEvent {
    Log {
        level: LogLevel,
        logger: Option<String>,
        data: Value,
    },
    Ask {
        method: String,
        params: Value,
        reply: oneshot::Sender<Result<Value, RpcError>>,
    },
}

/// Whom a session's own child serves, and who sees its lists: the session, or (a
/// 2026-07-28 request, a session of its own) the identity.
fn viewer_of(session: &SessionInfo) -> Viewer {
    match &session.scope {
        Some(scope) => Viewer::Session(scope.id()),
        None => Viewer::Identity(Arc::from(session.identity.principal())),
    }
}

/// Restarts of a failing child wait longer each time.
#[derive(Default)]
struct Backoff {
    failures: u32,
    not_before: Option<Instant>,
}

/// One upstream; see the module docs.
pub(crate) struct Upstream {
    pub name: Arc<str>,
    pub settings: UpstreamSettings,
    /// Put before its tool and prompt names.
    pub prefix: String,
    pub metrics: Arc<UpstreamMetrics>,
    env: Environment,
    /// `shared`: the one child.
    shared: Slot,
    /// `per_session`: a child per session (and per identity for 2026-07-28 requests), by
    /// whom it serves (who also sees its lists, where they differ from the registry's).
    slots: Mutex<HashMap<Viewer, Arc<Slot>>>,
    /// Starts that failed (the command cannot start, or does not initialize) wait longer
    /// each time, for every session.
    backoff: Mutex<Backoff>,
    in_flight: Option<Arc<tokio::sync::Semaphore>>,
    /// Calls forwarded so far (each one's key among its child's calls).
    calls_forwarded: AtomicU64,
    /// `per_session`: a place for each child running or starting, `max_children` in all. A
    /// place is taken before a child is started and given back when it ends, so that
    /// sessions arriving together cannot all pass a count of the children already running.
    places: Arc<tokio::sync::Semaphore>,
    rate: Mutex<(Instant, u32)>,
    epoch: Instant,
    /// Set while the server stops: no child is started any more.
    stopping: std::sync::atomic::AtomicBool,
    /// What it registered, to replace on `list_changed`.
    pub(crate) listed: Mutex<super::Listed>,
    /// Whether it answers `completion/complete`.
    pub(crate) completions: std::sync::atomic::AtomicBool,
}

impl Upstream {
    pub(crate) fn new(settings: UpstreamSettings, prefix: String, env: Environment) -> Arc<Self> {
        let in_flight = (settings.max_in_flight > 0)
            .then(|| Arc::new(tokio::sync::Semaphore::new(settings.max_in_flight)));
        Arc::new(Self {
            name: Arc::from(settings.name.as_str()),
            prefix,
            metrics: Arc::default(),
            env,
            shared: Slot::default(),
            slots: Mutex::new(HashMap::new()),
            backoff: Mutex::new(Backoff::default()),
            in_flight,
            calls_forwarded: AtomicU64::new(0),
            places: Arc::new(tokio::sync::Semaphore::new(
                settings
                    .max_children
                    .min(tokio::sync::Semaphore::MAX_PERMITS),
            )),
            rate: Mutex::new((Instant::now(), 0)),
            epoch: Instant::now(),
            stopping: std::sync::atomic::AtomicBool::new(false),
            listed: Mutex::default(),
            completions: std::sync::atomic::AtomicBool::new(false),
            settings,
        })
    }

    /// An error saying this upstream could not serve the request.
    pub(crate) fn unavailable(&self, why: impl std::fmt::Display) -> RpcError {
        RpcError::new(
            UPSTREAM_UNAVAILABLE,
            format!("Upstream unavailable: {}: {why}", self.name),
        )
        .with_data(json!({ "upstream": &*self.name, "retryable": true }))
    }

    /// [`unavailable`](Self::unavailable) for a failure of the connection to it. Why it could
    /// not connect (a command line, an address, a URL and its query) is the operator's, for
    /// the log; the client is told only that it could not. How a connection ended (an exit
    /// status, a close code) is told.
    fn unavailable_after(&self, error: &ClientError) -> RpcError {
        match error {
            ClientError::Connect(_) => self.unavailable("cannot connect (the server log says why)"),
            other => self.unavailable(other),
        }
    }

    /// Starts a child (on the gateway's runtime) for `session`, or for discovery
    /// (`None`); `place`, a session's own child's, is held as long as the child runs.
    pub(crate) fn start_child(
        self: &Arc<Self>,
        session: Option<&SessionInfo>,
        place: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> impl std::future::Future<Output = Result<Child, ClientError>> + Send + 'static {
        let calls = Arc::new(Calls::default());
        let viewer = match (session, self.settings.mode) {
            (Some(session), UpstreamMode::PerSession) => Some(viewer_of(session)),
            _ => None,
        };
        let handler = Arc::new(Handler {
            upstream: Arc::downgrade(self),
            calls: Arc::downgrade(&calls),
            client: std::sync::OnceLock::new(),
            viewer,
            relists: Arc::default(),
        });
        let own = handler.clone();
        let settings = &self.settings;
        let mut capabilities = json!({});
        match (session, settings.mode) {
            // A session's own child may ask what its client can answer.
            (Some(session), UpstreamMode::PerSession) => {
                for capability in ["roots", "sampling", "elicitation"] {
                    if let Some(declared) = session.client_capabilities.get(capability) {
                        capabilities[capability] = declared.clone();
                    }
                }
                // The client's `notifications/roots/list_changed` is not passed on to the
                // child: it is not told it would be (it asks `roots/list` when it needs them).
                if let Some(roots) = capabilities.get_mut("roots").and_then(Value::as_object_mut) {
                    roots.remove("listChanged");
                }
            }
            // A shared child may ask whichever client is the only one with a call on it.
            (_, UpstreamMode::Shared) => {
                capabilities = json!({ "roots": {}, "sampling": {}, "elicitation": {} });
            }
            _ => {}
        }
        let label: Arc<str> = match session {
            Some(session) => Arc::from(format!("{} trace={}", self.name, session.trace_id)),
            None => self.name.clone(),
        };
        let options = ClientOptions {
            name: self.env.client_name.clone(),
            protocol_version: settings.protocol_version.clone(),
            capabilities,
            initialize_timeout: Duration::from_millis(settings.initialize_timeout_ms),
            max_message_bytes: self.env.max_message_bytes,
            // A list that pages may come to what one that does not (one message) may: every
            // session's own child's list is kept, and a child may page without end.
            max_list_bytes: self.env.max_message_bytes,
            handler,
            label,
            ..ClientOptions::default()
        };
        let connect: BoxFuture<'static, Result<Client, ClientError>> = if settings.url.is_empty() {
            let mut command = StdioCommand::new(&settings.command).args(settings.args.clone());
            for (name, value) in &settings.env {
                command = command.env(name, value);
            }
            if let (Some(session), UpstreamMode::PerSession) = (session, settings.mode) {
                let identity = &session.identity;
                for (variable, field) in &settings.env_from_identity {
                    let value = match field.as_str() {
                        "sub" => identity.subject().to_owned(),
                        "principal" => identity.principal().to_owned(),
                        "proof" => identity.proof().as_str().to_owned(),
                        _ => identity.scopes().join(" "),
                    };
                    command = command.env(variable, value);
                }
            }
            if let Some(dir) = &settings.cwd {
                command = command.cwd(dir);
            }
            Box::pin(Client::stdio(command, options))
        } else {
            let url = settings.url.clone();
            let headers: Vec<(String, String)> = settings
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            // The config admits http(s):// (Streamable HTTP) and ws(s):// (WebSocket) only.
            if url.starts_with("ws://") || url.starts_with("wss://") {
                Box::pin(async move { Client::websocket(&url, &headers, options).await })
            } else {
                Box::pin(async move { Client::http(&url, &headers, options).await })
            }
        };
        // Where the child's pipes are driven (and what the kernel's parent-death signal is
        // tied to: a thread that lives as long as the server). A session's own child (and a
        // 2026-07-28 identity's) lives on the worker thread that serves the session: its
        // calls then cross no thread (two fewer wake-ups per call), and what it asks and
        // what cancels it leave in the order they were made. (An identity's child on the
        // gateway's thread had a round's cancel race its ask's answer; the Python SDK's
        // server then ended its session in 4 of 20 runs under load.) A child whose worker
        // stops at shutdown is killed as its watcher goes (`client::stdio`). A shared child
        // lives on the gateway's thread, which every worker reaches alike.
        let runtime = match (session, settings.mode) {
            (Some(_), UpstreamMode::PerSession) => {
                Handle::try_current().unwrap_or_else(|_| self.env.runtime.clone())
            }
            _ => self.env.runtime.clone(),
        };
        let metrics = self.metrics.clone();
        let gateway_runtime = self.env.runtime.clone();
        async move {
            let client = match runtime.spawn(connect).await {
                Ok(outcome) => outcome?,
                Err(_) => return Err(ClientError::Connect("the gateway is stopping".into())),
            };
            let _ = own.client.set(client.downgrade());
            metrics.children.inc();
            // Watched without being held: a child that nothing holds any more (its slot gone
            // while it started) is stopped as its last handle goes, not kept by its watcher.
            let closed = client.on_close();
            gateway_runtime.spawn(async move {
                closed.await;
                metrics.children.dec();
                drop(place);
            });
            Ok(Child {
                client,
                calls,
                started: Instant::now(),
                level_sent: Arc::new(AtomicU8::new(NO_LEVEL)),
            })
        }
    }

    /// The child that serves `session` (its own, or the shared one), started if there is
    /// none (or it ended).
    pub(crate) async fn child_for(
        self: &Arc<Self>,
        session: &SessionInfo,
    ) -> Result<Child, RpcError> {
        let slot = match self.settings.mode {
            UpstreamMode::Shared => None,
            UpstreamMode::PerSession => Some(self.session_slot(session)),
        };
        let slot_ref = slot.as_deref().unwrap_or(&self.shared);
        slot_ref.last_used.store(self.now_ms(), Ordering::Relaxed);
        let mut child = slot_ref.child.lock().await;
        if let Some(running) = child.as_ref() {
            if !running.client.is_closed() {
                return Ok(running.clone());
            }
            // It ended: the next one is a restart, waited for as the backoff says.
            self.metrics.restarts.inc();
            note_end(&slot_ref.backoff, running.started);
            *child = None;
        }
        if self.stopping.load(Ordering::Relaxed) {
            return Err(self.unavailable("the server is shutting down"));
        }
        if let Some(wait) = backoff_left(&self.backoff).or_else(|| backoff_left(&slot_ref.backoff))
        {
            return Err(self.unavailable(format!(
                "restarting after failures, retry in {} ms",
                wait.as_millis()
            )));
        }
        let place = match slot {
            None => None,
            Some(_) => match self.places.clone().try_acquire_owned() {
                Ok(place) => Some(place),
                Err(_) => {
                    return Err(self.unavailable(format!(
                        "{} children are running (max_children), retry later",
                        self.settings.max_children
                    )))
                }
            },
        };
        match self.start_child(Some(session), place).await {
            Ok(started) => {
                *crate::lock(&self.backoff) = Backoff::default();
                let viewer = slot.is_some().then(|| viewer_of(session));
                if let Some(viewer) = &viewer {
                    // What a session's own child offers may differ from what the upstream
                    // registered at start: the session is shown its child's lists.
                    let relist = super::relist(
                        self.clone(),
                        started.client.clone(),
                        Changes::ALL,
                        Some(viewer.clone()),
                    );
                    self.env.runtime.spawn(relist);
                }
                self.subscribe_all(&started.client, viewer);
                *child = Some(started.clone());
                Ok(started)
            }
            Err(error) => {
                note_failure(&self.backoff);
                tracing::warn!(upstream = %self.name, %error, "upstream could not be started");
                Err(self.unavailable_after(&error))
            }
        }
    }

    /// Whether it runs (or is starting) as many children as it may (`max_children`;
    /// `per_session`).
    pub(crate) fn is_full(&self) -> bool {
        self.settings.mode == UpstreamMode::PerSession && self.places.available_permits() == 0
    }

    /// The slot of `session` (or its identity), made on first use; a session's slot goes
    /// (and its child is stopped) when the session is over.
    fn session_slot(self: &Arc<Self>, session: &SessionInfo) -> Arc<Slot> {
        let scope = session.scope.clone();
        let key = viewer_of(session);
        let mut slots = crate::lock(&self.slots);
        if let Some(slot) = slots.get(&key) {
            return slot.clone();
        }
        let slot = Arc::new(Slot::default());
        slots.insert(key.clone(), slot.clone());
        drop(slots);
        if let Some(scope) = scope {
            let upstream = Arc::downgrade(self);
            scope.on_end(move || {
                if let Some(upstream) = upstream.upgrade() {
                    upstream.end_slot(&key);
                }
            });
        }
        slot
    }

    /// Whether a session's (or identity's) own child still has its place here.
    pub(crate) fn serves(&self, viewer: &Viewer) -> bool {
        crate::lock(&self.slots).contains_key(viewer)
    }

    /// What re-lists of the child `viewer` sees (the shared child's: `None`) take in turn;
    /// `None` when that session's child is gone.
    pub(crate) fn relisting(&self, viewer: Option<&Viewer>) -> Option<Arc<tokio::sync::Mutex<()>>> {
        match viewer {
            None => Some(self.shared.relisting.clone()),
            Some(viewer) => crate::lock(&self.slots)
                .get(viewer)
                .map(|slot| slot.relisting.clone()),
        }
    }

    /// Stops the child of a session that is over.
    fn end_slot(&self, key: &Viewer) {
        let Some(slot) = crate::lock(&self.slots).remove(key) else {
            return;
        };
        super::unshow(self, key);
        self.env.runtime.spawn(async move {
            if let Some(child) = slot.child.lock().await.take() {
                child.client.shutdown(SESSION_END_GRACE).await;
            }
        });
    }

    /// Stops the children of 2026-07-28 identities (and the shared child) idle for longer
    /// than `idle_timeout_ms`.
    pub(crate) fn reap_idle(&self) {
        let idle = self.settings.idle_timeout_ms;
        if idle == 0 {
            return;
        }
        let now = self.now_ms();
        let is_idle =
            |slot: &Slot| now.saturating_sub(slot.last_used.load(Ordering::Relaxed)) > idle;
        // `last_used` is when a call last began: a child running a call longer than the
        // timeout is not idle, nor one being started (its slot locked).
        let no_calls = |slot: &Slot| {
            slot.child
                .try_lock()
                .is_ok_and(|child| child.as_ref().is_none_or(|c| c.calls.is_idle()))
        };
        let expired: Vec<Viewer> = crate::lock(&self.slots)
            .iter()
            .filter(|(key, slot)| {
                matches!(key, Viewer::Identity(_)) && is_idle(slot) && no_calls(slot)
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in expired {
            self.end_slot(&key);
        }
        if self.settings.mode == UpstreamMode::Shared && is_idle(&self.shared) {
            if let Ok(mut child) = self.shared.child.try_lock() {
                // A child with calls in flight is not idle, whatever the clock says.
                let idle = child.as_ref().is_some_and(|c| c.calls.is_idle());
                if let Some(child) = child.take_if(|_| idle) {
                    tracing::info!(upstream = %self.name, "stopping the idle shared child");
                    self.env.runtime.spawn(async move {
                        child.client.shutdown(SESSION_END_GRACE).await;
                    });
                }
            }
        }
    }

    /// The registry its offers are registered in.
    pub(crate) fn registry(&self) -> &Registry {
        &self.env.registry
    }

    /// Subscribes `client` to every resource this upstream registered, when it offers
    /// subscriptions: its `resources/updated` then reach the sessions subscribed to the URI
    /// (the session keeps who subscribed; the upstream only has to send the updates).
    /// A stateless upstream has no session to tell: its changes (lists and those resources)
    /// come on a `subscriptions/listen` stream held open for as long as the client lives
    /// ([`listen`](Self::listen)).
    ///
    /// `viewer`: whose view a session's own child's lists change (`None`: a shared child).
    pub(crate) fn subscribe_all(self: &Arc<Self>, client: &Client, viewer: Option<Viewer>) {
        let capabilities = &client.server().capabilities;
        let declares = |kind: &str, flag: &str| {
            capabilities
                .get(kind)
                .and_then(|c| c.get(flag))
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        let offers = declares("resources", "subscribe");
        let uris: Vec<String> = if offers {
            crate::lock(&self.listed)
                .resources
                .keys()
                .take(MAX_SUBSCRIBED)
                .cloned()
                .collect()
        } else {
            Vec::new()
        };
        if client.is_stateless() {
            let mut notifications = json!({
                "toolsListChanged": declares("tools", "listChanged"),
                "promptsListChanged": declares("prompts", "listChanged"),
                "resourcesListChanged": declares("resources", "listChanged"),
            });
            if offers {
                notifications["resourceSubscriptions"] = json!(uris);
            }
            let listen = json!({ "notifications": notifications });
            self.env
                .runtime
                .spawn(self.clone().listen(client.downgrade(), listen, viewer));
            return;
        }
        if !offers {
            return;
        }
        let client = client.clone();
        self.env.runtime.spawn(async move {
            for uri in uris {
                let _ = client
                    .request("resources/subscribe", Some(json!({ "uri": uri })))
                    .await;
            }
        });
    }

    /// Holds a `subscriptions/listen` stream open on a stateless child for as long as the
    /// child's client is open, opening it again when the upstream ends it (a restart, a
    /// proxy's timeout), after a pause that grows while it keeps ending at once. What
    /// changed while it was down is caught up by listing the upstream again.
    async fn listen(
        self: Arc<Self>,
        child: crate::client::WeakClient,
        listen: Value,
        viewer: Option<Viewer>,
    ) {
        let mut pause = LISTEN_PAUSE;
        let mut reopened = false;
        // Held only while a stream is open: the task keeps no closed client alive.
        while let Some(client) = child.upgrade().filter(|c| !c.is_closed()) {
            if reopened {
                let relist =
                    super::relist(self.clone(), client.clone(), Changes::ALL, viewer.clone());
                tokio::spawn(relist);
            }
            let opened = Instant::now();
            let ended = client
                .request("subscriptions/listen", Some(listen.clone()))
                .await;
            if let Err(error) = ended {
                tracing::debug!(upstream = %self.name, %error, "the listen stream ended");
            }
            drop(client);
            if opened.elapsed() > MAX_BACKOFF {
                pause = LISTEN_PAUSE;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_BACKOFF);
            reopened = true;
        }
    }

    /// The shared child, when one runs.
    pub(crate) async fn shared_child(&self) -> Option<Child> {
        self.shared.child.lock().await.clone()
    }

    /// Keeps a child started for discovery as the shared one.
    pub(crate) async fn adopt_shared(&self, child: Child) {
        self.shared
            .last_used
            .store(self.now_ms(), Ordering::Relaxed);
        *self.shared.child.lock().await = Some(child);
    }

    /// Stops every child, each with `grace` between SIGTERM and SIGKILL.
    pub(crate) async fn stop(&self, grace: Duration) {
        self.stopping.store(true, Ordering::Relaxed);
        let slots: Vec<Arc<Slot>> = crate::lock(&self.slots).drain().map(|(_, s)| s).collect();
        let mut stopping = Vec::new();
        if let Some(child) = self.shared.child.lock().await.take() {
            stopping.push(child);
        }
        for slot in slots {
            if let Some(child) = slot.child.lock().await.take() {
                stopping.push(child);
            }
        }
        futures_util::future::join_all(stopping.iter().map(|c| c.client.shutdown(grace))).await;
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// A slot of this upstream's in-flight limit, and a check of its rate.
    pub(crate) async fn admit(
        &self,
    ) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, RpcError> {
        if self.settings.requests_per_second > 0 {
            let mut rate = crate::lock(&self.rate);
            if rate.0.elapsed() >= Duration::from_secs(1) {
                *rate = (Instant::now(), 0);
            }
            if rate.1 >= self.settings.requests_per_second {
                return Err(self.unavailable(format!(
                    "over its rate of {} requests per second, retry later",
                    self.settings.requests_per_second
                )));
            }
            rate.1 += 1;
        }
        match &self.in_flight {
            Some(slots) => Ok(slots.clone().acquire_owned().await.ok()),
            None => Ok(None),
        }
    }

    /// Forwards one request of `ctx`'s to the child and waits for its answer, passing on
    /// what crosses meanwhile: progress (under the client's own token), the child's log
    /// lines (at the client's level) and its requests to the client. Dropping the future
    /// (the client cancelled) cancels it upstream; a late answer is then dropped.
    pub(crate) async fn forward(
        self: &Arc<Self>,
        ctx: &RequestContext,
        method: &str,
        params: Value,
    ) -> Result<Box<RawValue>, RpcError> {
        let started = Instant::now();
        self.metrics.requests.inc();
        let outcome = self.forward_inner(ctx, method, params).await;
        self.metrics.latency.observe(started.elapsed());
        if outcome.is_err() {
            self.metrics.errors.inc();
        }
        outcome
    }

    async fn forward_inner(
        self: &Arc<Self>,
        ctx: &RequestContext,
        method: &str,
        params: Value,
    ) -> Result<Box<RawValue>, RpcError> {
        // Counted before any wait: the calls' order is their requests'.
        let call_id = self.calls_forwarded.fetch_add(1, Ordering::Relaxed);
        let _slot = self.admit().await?;
        let child = self.child_for(ctx.session()).await?;
        if self.settings.mode == UpstreamMode::PerSession {
            child.pass_log_level(ctx).await;
        }
        let (events_tx, mut event_rx) = mpsc::channel(CALL_EVENTS);
        let session = ctx.session().scope.as_ref().map(|s| s.id());
        let link = CallLink {
            events: events_tx.clone(),
            session,
        };
        crate::lock(&child.calls.by_id).insert(call_id, link);
        let _unlink = Unlink {
            calls: &child.calls,
            id: call_id,
        };
        let (progress, mut progress_rx) = if ctx.wants_progress() {
            let (tx, rx) = mpsc::channel(16);
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let answer = child.client.request_with(
            method,
            Some(params),
            Call {
                progress,
                // A stateless upstream's questions belong to this call: they reach its
                // client as the child's own requests do; so do the log lines and requests
                // an HTTP upstream sends on this call's own stream (attack run 52c: on a
                // shared upstream they went to whichever session alone had calls in flight,
                // or nowhere when several had).
                inputs: Some(Arc::new(CallInputs {
                    events: events_tx.clone(),
                }) as Arc<dyn ClientHandler>),
            },
        );
        tokio::pin!(answer);
        let mut asks = FuturesUnordered::new();
        let outcome = loop {
            tokio::select! {
                // What the child sent before its answer goes out before it.
                biased;
                Some(p) = async { match progress_rx.as_mut() { Some(rx) => rx.recv().await, None => None } } => {
                    ctx.report_progress(p.progress, p.total, p.message.as_deref());
                }
                Some(event) = event_rx.recv() => match event {
                    CallEvent::Log { level, logger, data } => ctx.log_to(level, logger.as_deref(), data),
                    CallEvent::Ask { method, params, reply } => asks.push(async move {
                        let answer = ctx.ask_client(&method, params).await.map_err(|e| {
                            RpcError::new(-32603, format!("the client could not answer: {e}"))
                        });
                        let _ = reply.send(answer);
                    }),
                },
                Some(()) = asks.next(), if !asks.is_empty() => {}
                outcome = &mut answer => break outcome,
            }
        };
        // The child wrote these before its answer; they reached their channels before it.
        while let Some(p) = progress_rx.as_mut().and_then(|rx| rx.try_recv().ok()) {
            ctx.report_progress(p.progress, p.total, p.message.as_deref());
        }
        while let Ok(event) = event_rx.try_recv() {
            if let CallEvent::Log {
                level,
                logger,
                data,
            } = event
            {
                ctx.log_to(level, logger.as_deref(), data);
            }
        }
        outcome.map_err(|error| match error {
            ClientError::Rpc {
                code,
                message,
                data,
            } => RpcError {
                code,
                message,
                data,
            },
            other => {
                if matches!(other, ClientError::Connect(_)) {
                    tracing::warn!(upstream = %self.name, error = %other, "upstream could not be reached");
                }
                self.unavailable_after(&other)
            }
        })
    }
}

impl Child {
    /// Passes the session's log level on to its own child (`logging/setLevel`) when the
    /// child was not yet told it, so that the child does not write the lines the gateway
    /// would drop. The gateway still filters what arrives (a line already on its way, a
    /// child that ignores the level). A shared child serves sessions of different levels:
    /// it is never told one.
    async fn pass_log_level(&self, ctx: &RequestContext) {
        let Some(level) = ctx.log_level() else {
            return;
        };
        // The common case, one load: the child knows the level already.
        if self.level_sent.load(Ordering::Relaxed) == level as u8 {
            return;
        }
        let logs = self.client.server().capabilities.get("logging").is_some();
        if self.level_sent.swap(level as u8, Ordering::Relaxed) == level as u8
            || !logs
            || self.client.is_stateless()
        {
            return;
        }
        let Ok(level) = serde_json::to_value(level) else {
            return;
        };
        // Waited for (once per change), so that the request that found the change already
        // runs at the new level; a child that refuses it is still filtered here.
        let _ = self
            .client
            .request("logging/setLevel", Some(json!({ "level": level })))
            .await;
    }
}

/// How long `backoff` still holds starts back.
fn backoff_left(backoff: &Mutex<Backoff>) -> Option<Duration> {
    let backoff = crate::lock(backoff);
    let left = backoff.not_before?.checked_duration_since(Instant::now())?;
    (!left.is_zero()).then_some(left)
}

/// A child ended: one that lived long was healthy, and clears the backoff.
fn note_end(backoff: &Mutex<Backoff>, started: Instant) {
    if started.elapsed() >= HEALTHY_AFTER {
        *crate::lock(backoff) = Backoff::default();
    } else {
        note_failure(backoff);
    }
}

/// One more failure: the first restart is at once; then 0.5 s, 1 s, 2 s … up to 30 s.
fn note_failure(backoff: &Mutex<Backoff>) {
    let mut backoff = crate::lock(backoff);
    let wait = if backoff.failures == 0 {
        Duration::ZERO
    } else {
        (Duration::from_millis(250) * 2u32.saturating_pow(backoff.failures.min(8))).min(MAX_BACKOFF)
    };
    backoff.failures = backoff.failures.saturating_add(1);
    backoff.not_before = Some(Instant::now() + wait);
}

/// Takes a call out of its child's table when it ends (or is dropped).
struct Unlink<'a> {
    calls: &'a Calls,
    id: u64,
}

impl Drop for Unlink<'_> {
    fn drop(&mut self) {
        crate::lock(&self.calls.by_id).remove(&self.id);
    }
}

impl Calls {
    fn is_idle(&self) -> bool {
        crate::lock(&self.by_id).is_empty()
    }

    /// The call a message of the child that names none belongs to: the oldest of its calls
    /// when they all come from one session (always, for a per-session child), else none (the
    /// message could be any of theirs). The oldest: a call that asks its client something
    /// has usually run for a while, and one begun after it would take the ask along when it
    /// ends (the child's question then failed).
    fn only_session(&self) -> Result<mpsc::Sender<CallEvent>, &'static str> {
        let calls = crate::lock(&self.by_id);
        let mut links = calls.values();
        let Some(first) = links.next() else {
            return Err("no client request is in flight on this upstream");
        };
        let one_session =
            first.session.is_some() && links.all(|link| link.session == first.session);
        if calls.len() == 1 || one_session {
            Ok(first.events.clone())
        } else {
            Err(
                "calls of several clients are in flight on this shared upstream, so mcp-ws \
                 cannot tell which client this is for (use mode = \"per_session\" for upstreams \
                 that ask clients things)",
            )
        }
    }
}

/// What a child sends besides answers and progress.
struct Handler {
    upstream: Weak<Upstream>,
    calls: Weak<Calls>,
    /// The child itself, once connected (weakly: the client holds this handler).
    client: std::sync::OnceLock<crate::client::WeakClient>,
    /// Who sees what a session's own child lists (`None`: a shared child, whose lists are
    /// the registry's).
    viewer: Option<Viewer>,
    /// The kinds the child said changed and that are not listed again yet
    /// ([`Changes::bits`]), and [`RELISTING`] while its re-lister runs.
    relists: Arc<AtomicU8>,
}

/// In [`Handler::relists`]: the child's re-lister runs.
const RELISTING: u8 = 0x80;

/// A child's re-lister: lists again the kinds it said changed, and again while it says more
/// changed meanwhile; ends when nothing is left to list (or the child is gone).
async fn relist_while_changed(
    upstream: Arc<Upstream>,
    child: crate::client::WeakClient,
    relists: Arc<AtomicU8>,
    viewer: Option<Viewer>,
) {
    loop {
        // Taken before the listing: a change said during it is listed after it.
        let kinds = Changes::from_bits(relists.fetch_and(RELISTING, Ordering::AcqRel));
        if kinds.is_empty() {
            let done = relists.compare_exchange(RELISTING, 0, Ordering::AcqRel, Ordering::Acquire);
            if done.is_ok() {
                return;
            }
            continue;
        }
        let Some(client) = child.upgrade() else {
            return;
        };
        super::relist(upstream.clone(), client, kinds, viewer.clone()).await;
    }
}

#[derive(serde::Deserialize)]
struct LogParams {
    level: String,
    #[serde(default)]
    logger: Option<String>,
    #[serde(default)]
    data: Value,
}

/// The [`CallEvent::Log`] of a `notifications/message`'s params; `None` when they are not
/// one.
fn log_event(params: Option<&RawValue>) -> Option<CallEvent> {
    let log = serde_json::from_str::<LogParams>(params?.get()).ok()?;
    Some(CallEvent::Log {
        level: LogLevel::parse(&log.level)?,
        logger: log.logger,
        data: log.data,
    })
}

#[derive(serde::Deserialize)]
struct UpdatedParams {
    uri: String,
}

impl ClientHandler for Handler {
    fn notification(&self, method: &str, params: Option<&RawValue>) {
        let Some(upstream) = self.upstream.upgrade() else {
            return;
        };
        match method {
            "notifications/message" => {
                let Some(log) = log_event(params) else {
                    return;
                };
                let Some(calls) = self.calls.upgrade() else {
                    return;
                };
                match calls.only_session() {
                    // A full channel drops the line, as the session's own budget would.
                    Ok(events) => {
                        let _ = events.try_send(log);
                    }
                    Err(why) => {
                        tracing::debug!(upstream = %upstream.name, why, "upstream log line not passed on")
                    }
                }
            }
            "notifications/tools/list_changed"
            | "notifications/resources/list_changed"
            | "notifications/prompts/list_changed" => {
                let Some(kind) = method.split('/').nth(1).and_then(Changes::named) else {
                    return;
                };
                // Listed again from the child that said it changed: by the one re-lister of
                // this child, started unless it runs already (it then lists this kind too,
                // after what it is listing now). A child's flood of notifications costs a
                // few lists, not a task and a list each.
                let before = self
                    .relists
                    .fetch_or(kind.bits() | RELISTING, Ordering::AcqRel);
                if before & RELISTING == 0 {
                    if let Some(child) = self.client.get().cloned() {
                        tokio::spawn(relist_while_changed(
                            upstream,
                            child,
                            self.relists.clone(),
                            self.viewer.clone(),
                        ));
                    } else {
                        self.relists.store(0, Ordering::Release);
                    }
                }
            }
            "notifications/resources/updated" => {
                if let Some(p) =
                    params.and_then(|p| serde_json::from_str::<UpdatedParams>(p.get()).ok())
                {
                    // A session's own child's resource is that session's: what its child
                    // serves may differ from another's at the same URI.
                    match &self.viewer {
                        Some(viewer) => upstream.env.registry.view_resource_updated(viewer, &p.uri),
                        None => upstream.env.registry.resource_updated(&p.uri),
                    }
                }
            }
            _ => {}
        }
    }

    fn request(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> BoxFuture<'static, Result<Value, RpcError>> {
        let routed = self
            .calls
            .upgrade()
            .ok_or("the upstream's calls are gone")
            .and_then(|calls| calls.only_session());
        match routed {
            Ok(events) => ask_through(events, method, params),
            Err(why) => Box::pin(async move { Err(RpcError::new(-32603, why)) }),
        }
    }
}

/// Asks the client of the call `events` belongs to, and waits for its answer.
fn ask_through(
    events: mpsc::Sender<CallEvent>,
    method: &str,
    params: Option<Box<RawValue>>,
) -> BoxFuture<'static, Result<Value, RpcError>> {
    let method = method.to_owned();
    Box::pin(async move {
        let params = match params {
            Some(raw) => serde_json::from_str(raw.get())
                .map_err(|e| RpcError::new(-32602, format!("Invalid params: {e}")))?,
            None => json!({}),
        };
        let (reply, answer) = oneshot::channel();
        events
            .try_send(CallEvent::Ask {
                method,
                params,
                reply,
            })
            .map_err(|_| {
                RpcError::new(-32603, "the call this request belongs to is busy or over")
            })?;
        answer.await.unwrap_or_else(|_| {
            Err(RpcError::new(
                -32603,
                "the call this request belongs to ended",
            ))
        })
    })
}

/// What an upstream sends that belongs to one call: a stateless upstream's questions to
/// complete it (its `input_required` rounds), and the log lines and requests an HTTP
/// upstream sends on the call's own stream. They go to that call's client, with no guessing
/// which call they are for.
struct CallInputs {
    events: mpsc::Sender<CallEvent>,
}

impl ClientHandler for CallInputs {
    fn takes_call_stream(&self) -> bool {
        true
    }

    /// A log line that came with this call (the client passes these alone).
    fn notification(&self, method: &str, params: Option<&RawValue>) {
        if method == "notifications/message" {
            if let Some(log) = log_event(params) {
                // A full channel drops the line, as the session's own budget would.
                let _ = self.events.try_send(log);
            }
        }
    }

    fn request(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> BoxFuture<'static, Result<Value, RpcError>> {
        ask_through(self.events.clone(), method, params)
    }
}
