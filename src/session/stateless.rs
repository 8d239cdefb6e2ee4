//! The stateless 2026-07-28 revision in the session core: a request whose `_meta` names a
//! protocol version is served from that `_meta` alone (its version, the client's capabilities
//! and info, its log level), whatever else the connection did; an `initialize` on the same
//! connection starts a session-era session as before, and the two never share state.
//!
//! Here: recognising and checking such a request, its method table (`server/discover`,
//! `subscriptions/listen`; no `initialize`, `ping`, `logging/setLevel`, `resources/subscribe`),
//! multi round-trip requests (asks answered from `inputResponses`, a signed `requestState`),
//! and the shape of its results (`resultType`, the server's identity in `_meta`, caching
//! hints on discover, lists and reads).

use super::dispatch::Dispatch;
use super::era::Era;
use super::shape::{stateless_answer, stateless_result, StatelessRequest, StatelessShape};
use super::{Request, Session};
use crate::context::{Ask, Input, Rounds, SessionInfo};
use crate::protocol::jsonrpc::{Params, RequestId};
use crate::protocol::mcp::Offers;
use crate::protocol::mcp::{
    server_capabilities, Error, LogLevel, Method, ProtocolVersion, RequestMeta,
};
use crate::protocol::mrtr::BindingParts;
use crate::registry::{ListKind, Viewer};
use crate::worker::OnInput;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use std::rc::Rc;
use std::sync::Arc;

/// The `_meta` key tagging every notification of a `subscriptions/listen` stream.
pub const SUBSCRIPTION_ID_META: &str = "io.modelcontextprotocol/subscriptionId";

/// What is said of params that do not read: serde's reason, without its position (a line
/// and column in the params, not in the message the client sent), and cut to 200 bytes (it
/// may quote what the client sent: a `_meta` that is a string of megabytes).
fn unreadable_params(error: &serde_json::Error) -> String {
    let reason = error.to_string();
    let reason = reason
        .rsplit_once(" at line ")
        .map_or(reason.as_str(), |(reason, _)| reason);
    let cut = crate::floor_char_boundary(reason, 200);
    let more = if cut < reason.len() { "…" } else { "" };
    format!("params do not read: {}{more}", &reason[..cut])
}

impl Session {
    /// The era of `request`, whose `_meta` is `meta`: stateless when it names 2026-07-28
    /// (with what that `_meta` establishes), else session.
    ///
    /// # Errors
    /// For a request that names a version in `_meta`: -32602 for a malformed `_meta`, -32022
    /// for a version this server does not speak. For a request that must be a 2026-07-28
    /// one: -32602 if its `_meta` names no version, or its params do not read
    /// (`unreadable` says why, a member named twice: then that is what the error says).
    /// Params that do not read and whose `_meta` names the version key (read leniently:
    /// [`names_version_key`]) are a 2026-07-28 request too, malformed: -32602.
    pub(super) fn stateless_request(
        &self,
        request: &Request<'_>,
        meta: Option<&RequestMeta<'_>>,
        unreadable: impl FnOnce() -> Option<serde_json::Error>,
    ) -> Result<Era, Error> {
        // Methods only 2026-07-28 has, and everything a 2026-07-28-only host (an HTTP request
        // whose header named that revision) receives, need the per-request `_meta`.
        let must_be_stateless = self.stateless_only
            || matches!(
                request.method.as_ref(),
                "server/discover" | "subscriptions/listen"
            );
        let Some(version) = meta.and_then(|m| m.protocol_version) else {
            if must_be_stateless && request.method == "initialize" {
                // A connection pinned to 2026-07-28 has no handshake: say which version to
                // speak instead.
                return Err(Error::UnsupportedProtocolVersion {
                    requested: requested_in_initialize(&request.params),
                    pinned: self.pinned,
                });
            }
            return match unreadable() {
                // Params that do not read (a member named twice) and name the revision's
                // version key: a 2026-07-28 request, malformed (the head, `_meta` with it,
                // could not be read to tell). The text is looked at only for such params.
                Some(error) if must_be_stateless || names_version_key(&request.params) => {
                    Err(Error::MalformedMeta(unreadable_params(&error)))
                }
                _ if must_be_stateless => Err(Error::MalformedMeta(
                    "_meta.io.modelcontextprotocol/protocolVersion: required".into(),
                )),
                _ => Ok(Era::Session),
            };
        };
        let Some(meta) = meta else {
            return Ok(Era::Session);
        };
        let malformed = |what: &str| Error::MalformedMeta(format!("_meta.{what}"));
        let version: &str = serde_json::from_str(version.get())
            .map_err(|_| malformed("io.modelcontextprotocol/protocolVersion: must be a string"))?;
        let version = ProtocolVersion::STATELESS
            .into_iter()
            .find(|v| v.as_str() == version)
            .filter(|v| self.pinned.is_none_or(|pinned| pinned == *v))
            .ok_or_else(|| Error::UnsupportedProtocolVersion {
                requested: version.chars().take(64).collect(),
                pinned: self.pinned,
            })?;
        // Kept with the connection for the next request (and by its tasks): bounded, as a
        // session's `initialize` is.
        let too_long = [meta.client_capabilities, meta.client_info]
            .into_iter()
            .flatten()
            .any(|raw| raw.get().len() > super::MAX_CLIENT_DESCRIPTION_BYTES);
        if too_long {
            return Err(malformed(&format!(
                "io.modelcontextprotocol/clientCapabilities and clientInfo: at most {} bytes each",
                super::MAX_CLIENT_DESCRIPTION_BYTES
            )));
        }
        let capabilities = match meta.client_capabilities {
            None => {
                return Err(malformed(
                    "io.modelcontextprotocol/clientCapabilities: required",
                ))
            }
            Some(raw) if raw.get() == "{}" => self.shared.stateless.no_capabilities.clone(),
            Some(raw) => self
                .last_client_capabilities
                .get_or_parse(raw.get(), |text| match serde_json::from_str(text) {
                    Ok(value @ Value::Object(_)) => Some(value),
                    _ => None,
                })
                .ok_or_else(|| {
                    malformed("io.modelcontextprotocol/clientCapabilities: must be an object")
                })?,
        };
        let client_info = match meta.client_info {
            None => self.shared.stateless.unknown_client.clone(),
            Some(raw) => self
                .last_client_info
                .get_or_parse(raw.get(), |text| serde_json::from_str(text).ok())
                .ok_or_else(|| {
                    malformed("io.modelcontextprotocol/clientInfo: not an Implementation")
                })?,
        };
        let log_level = match meta.log_level {
            None => None,
            Some(raw) => Some(
                serde_json::from_str::<&str>(raw.get())
                    .ok()
                    .and_then(LogLevel::parse)
                    .ok_or_else(|| malformed("io.modelcontextprotocol/logLevel: unknown level"))?,
            ),
        };
        Ok(Era::Stateless(StatelessRequest {
            info: self.stateless_info(version, capabilities, client_info),
            log_level,
        }))
    }

    /// The `SessionInfo` of a 2026-07-28 request: the previous request's when version,
    /// capabilities and client are the same (the parse caches hand out the same values for
    /// the same text), which is what a client sends request after request.
    fn stateless_info(
        &self,
        version: ProtocolVersion,
        capabilities: Arc<Value>,
        client_info: Arc<crate::model::Implementation>,
    ) -> Rc<SessionInfo> {
        let info = match self.last_stateless_info.take() {
            Some(info)
                if info.protocol_version == version
                    && Arc::ptr_eq(&info.client_capabilities, &capabilities)
                    && Arc::ptr_eq(&info.client_info, &client_info) =>
            {
                info
            }
            _ => Rc::new(SessionInfo {
                protocol_version: version,
                client_capabilities: capabilities,
                client_info,
                identity: self.admission.identity.clone(),
                trace_id: self.admission.trace_id.clone(),
                scope: None,
            }),
        };
        self.last_stateless_info.set(Some(info.clone()));
        info
    }

    /// Routes a 2026-07-28 request.
    pub(super) fn route_stateless(
        &mut self,
        request: &Request<'_>,
        stateless: StatelessRequest,
        exchange: u64,
        batch: Option<u64>,
    ) -> Result<Dispatch, Error> {
        if batch.is_some() {
            return Err(Error::invalid_request(
                "a 2026-07-28 request must not be sent in a batch",
            ));
        }
        let offers = self.shared.registry.offers();
        let params = match request.params {
            Params::Raw(raw) => raw,
            Params::Parsed(_) => None,
        };
        let method = Method::parse(&request.method)
            .filter(|m| serves_stateless(*m, offers))
            .ok_or_else(|| Error::MethodNotFound {
                method: request.method.clone().into_owned(),
            })?;
        let version = stateless.info.protocol_version;
        let inline = match method {
            Method::Discover => self.discover(offers),
            Method::ToolsList => self.list_stateless(ListKind::Tools, version, params)?,
            Method::ResourcesList => self.list_stateless(ListKind::Resources, version, params)?,
            Method::ResourceTemplatesList => {
                self.list_stateless(ListKind::ResourceTemplates, version, params)?
            }
            Method::PromptsList => self.list_stateless(ListKind::Prompts, version, params)?,
            Method::ToolsCall => {
                return self
                    .prepare_tool_call(&request.params, Era::Stateless(stateless))
                    .map(Dispatch::Worker)
            }
            Method::ResourcesRead => {
                return self
                    .prepare_read(params, Era::Stateless(stateless))
                    .map(Dispatch::Worker)
            }
            Method::PromptsGet => {
                return self
                    .prepare_prompt(params, Era::Stateless(stateless))
                    .map(Dispatch::Worker)
            }
            Method::CompletionComplete => {
                return self.prepare_completion(params, Era::Stateless(stateless))
            }
            Method::SubscriptionsListen => {
                return self
                    .listen(request.id.clone(), params, &stateless, exchange, offers)
                    .map(Dispatch::Listening)
            }
            Method::TasksGet | Method::TasksUpdate | Method::TasksCancel => {
                return self
                    .prepare_task_method(method, params, stateless)
                    .map(Dispatch::Worker)
            }
            // Not served to 2026-07-28 requests (`serves_stateless`).
            Method::Initialize
            | Method::Ping
            | Method::LoggingSetLevel
            | Method::ResourcesSubscribe
            | Method::ResourcesUnsubscribe => {
                return Err(Error::MethodNotFound {
                    method: request.method.clone().into_owned(),
                })
            }
        };
        Ok(Dispatch::Inline(inline))
    }

    /// `server/discover`: versions, capabilities, instructions, caching hints.
    fn discover(&self, offers: Offers) -> String {
        let supported: Vec<&str> = ProtocolVersion::STATELESS
            .iter()
            .map(|v| v.as_str())
            .collect();
        let mut body = json!({
            "supportedVersions": supported,
            "capabilities": server_capabilities(ProtocolVersion::V2026_07_28, offers),
        });
        if let Some(instructions) = &self.shared.instructions {
            body["instructions"] = json!(instructions);
        }
        let cache = &self.shared.settings.cache;
        self.stateless_result(
            &body.to_string(),
            &self.cache_hints(cache.discover_ttl_ms),
            None,
        )
    }

    fn list_stateless(
        &self,
        kind: ListKind,
        version: ProtocolVersion,
        params: Option<&RawValue>,
    ) -> Result<String, Error> {
        let page = self.list_page(kind, version, params, self.identity_viewer())?;
        let hints = self.cache_hints(self.shared.settings.cache.list_ttl_ms);
        Ok(self.stateless_result(&page.to_result(kind.member()), &hints, None))
    }

    /// `,"ttlMs":N,"cacheScope":"…"` for a cacheable result.
    pub(super) fn cache_hints(&self, ttl_ms: u64) -> String {
        format!(
            r#","ttlMs":{ttl_ms},"cacheScope":"{}""#,
            self.shared.settings.cache.scope
        )
    }

    /// A 2026-07-28 result from a result object: `resultType` and the server's identity go
    /// first, `extra` (members, each with a leading comma) last; `user_meta`, the result's own
    /// `_meta`, is merged with the identity.
    pub(super) fn stateless_result(
        &self,
        body: &str,
        extra: &str,
        user_meta: Option<&Value>,
    ) -> String {
        stateless_result(&self.shared.stateless, body, extra, user_meta, "complete")
    }

    /// Sets up a multi round-trip request: checks its `requestState` against the request,
    /// gathers the answers (from the state, then `inputResponses`), and says how to answer
    /// when it asks for something it has no answer to.
    pub(super) fn rounds(
        &self,
        binding: BindingParts,
        input_responses: Option<&RawValue>,
        request_state: Option<&str>,
    ) -> Result<(Input, OnInput), Error> {
        let mut answers = Map::new();
        let mut asked_before = std::collections::HashSet::new();
        if let Some(token) = request_state {
            let state = self
                .shared
                .stateless
                .state_key
                .verify(token, &binding.binding())
                .map_err(Error::InvalidRequestState)?;
            asked_before.extend(state.outstanding);
            asked_before.extend(state.responses.keys().cloned());
            answers = state.responses;
        }
        // A malformed `inputResponses` (not an object) answers nothing: the asks are made
        // again. Answers are the client's word, carried or given now alike (the state's tag
        // binds them to this request and identity, it does not vouch for them): a key no ask
        // of this round reaches is never read, and is not carried into the next state, which
        // holds only answers to keys asked (`Rounds::carried_answers`): an answer given ahead
        // of its ask serves only an ask of this same round.
        if let Some(Ok(Value::Object(responses))) =
            input_responses.map(|r| serde_json::from_str(r.get()))
        {
            answers.extend(responses);
        }
        let rounds = Rc::new(Rounds::new(
            answers,
            asked_before,
            self.shared.settings.limits.max_in_flight_per_session,
        ));
        let shared = self.shared.clone();
        let carried = rounds.clone();
        let on_input: OnInput = Box::new(move |id, asks| {
            let frame = input_required(
                &shared.stateless,
                &binding,
                carried.carried_answers(),
                asks,
                shared.settings.limits.max_message_bytes,
            )?;
            Ok(crate::protocol::jsonrpc::encode_result(&id, &frame))
        });
        Ok((Input::Rounds(rounds), on_input))
    }
}

impl Session {
    /// Opens a `subscriptions/listen` stream: the filter's honoured part (the kinds this
    /// server declares, the resources the caller may subscribe to) is acknowledged first,
    /// then every matching change is sent on the stream, tagged with the listen request's
    /// id, until the client cancels it (or closes the HTTP stream) or the server ends it
    /// with a result. Returns the acknowledgement.
    fn listen(
        &mut self,
        id: RequestId,
        params: Option<&RawValue>,
        stateless: &StatelessRequest,
        exchange: u64,
        offers: Offers,
    ) -> Result<String, Error> {
        #[derive(Deserialize)]
        struct ListenParams {
            notifications: ListenFilter,
        }
        let p: ListenParams =
            crate::protocol::mcp::parse_object(params).map_err(Error::InvalidParams)?;
        let limits = &self.shared.settings.limits;
        let listening = self.occasional.as_ref().map_or(0, |o| o.listeners.len());
        if listening >= limits.max_listens_per_session {
            return Err(Error::InvalidParams(format!(
                "too many subscriptions/listen streams: a connection may hold {}",
                limits.max_listens_per_session
            )));
        }
        let asked = p.notifications;
        // A connection's listens hold their resource URIs and task ids, with what its
        // session subscribed to, within one `max_subscriptions_per_session`: each is kept
        // (and its updates looked for) as long as its listen is open, and a connection may
        // open `max_listens_per_session` listens (a bound per listen let one connection hold
        // that many times the limit).
        let max = limits.max_subscriptions_per_session;
        // The room left: a listen naming more (distinct) URIs or task ids than that is
        // refused before any is looked at.
        let mut room = max.saturating_sub(self.subscriptions_held());
        let refused = &self.shared.metrics.rejections.subscriptions;
        let too_many = || {
            refused.inc();
            Error::TooManySubscriptions { limit: max }
        };
        let task_ids = asked.task_ids.filter(|_| offers.tasks);
        if task_ids.is_some()
            && !crate::cluster::tasks::declared(&stateless.info.client_capabilities)
        {
            return Err(Error::MissingClientCapability {
                required: crate::protocol::mcp::required_tasks_extension(),
            });
        }
        let mut uris = asked.resource_subscriptions.filter(|_| offers.resources);
        if let Some(uris) = &mut uris {
            // What `resources/subscribe` would refuse is left out (and so out of the
            // acknowledgement): a resource the caller's policy forbids (its updates would
            // tell of it), a URI over the subscription limit, one that names no resource
            // its identity sees. A listen naming more distinct URIs than there is room for
            // is refused before any is looked at: a message may list a million, and each
            // look is a search of the resources (a listen of 4 MiB held its session's
            // thread for each).
            let distinct = distinct_at_most(std::mem::take(uris), room).ok_or_else(too_many)?;
            let viewer = self.identity_viewer();
            let registry = &self.shared.registry;
            let access = &self.admission.access;
            for uri in distinct {
                // Followed (and acknowledged) as the spelling that found the resource: its
                // updates name that one.
                let found = (uri.len() <= limits.max_subscription_uri_bytes)
                    .then(|| {
                        registry.find_resource(&uri, viewer, |uri| access.may_use_resource(uri))
                    })
                    .flatten()
                    .map(|(found, _)| found.into_owned());
                match found {
                    Some(found) => uris.push(found),
                    None => refused.inc(),
                }
            }
            uris.sort();
            // Two spellings of one URI are one subscription.
            uris.dedup();
            room -= uris.len();
        }
        let task_ids = match task_ids {
            None => None,
            Some(mut ids) => {
                // An id that is not a UUID is no task (`tasks/get` looks none up): it is
                // left out of the acknowledgement, which names the ids the server agreed to
                // follow, and is not held (a "task id" of megabytes was kept as long as its
                // listen). A well-formed id is followed whether or not its task is known
                // here: it may run on another node, or be one the caller may not see, which
                // the caller must not learn from the acknowledgement. Only the form this
                // server hands out (lowercase, hyphenated) is followed: the notes are matched
                // by the id's text, and another spelling of it would never hear anything. The
                // form is checked first: it costs no more than reading the list did.
                ids.retain(|id| {
                    let task_like = crate::cluster::tasks::is_task_id(id);
                    if !task_like {
                        refused.inc();
                    }
                    task_like
                });
                let mut ids: Vec<String> = distinct_at_most(ids, room)
                    .ok_or_else(too_many)?
                    .into_iter()
                    .collect();
                ids.sort();
                Some(ids)
            }
        };
        let filter = ListenFilter {
            tools_list_changed: asked.tools_list_changed && offers.tools,
            prompts_list_changed: asked.prompts_list_changed && offers.prompts,
            resources_list_changed: asked.resources_list_changed && offers.resources,
            resource_subscriptions: uris,
            task_ids,
        };
        let viewer = || Viewer::Identity(Arc::from(self.admission.identity.principal()));
        if self.bus.is_none() {
            self.bus = Some(self.shared.registry.bus().attach(&self.inbox, viewer()));
        } else if self.is_initialized()
            && self
                .occasional
                .as_ref()
                .is_none_or(|o| o.identity_views.is_none())
        {
            // The connection's registration is its session's (`initialize`): the listens
            // also hear of their identity's views.
            let views = self
                .shared
                .registry
                .bus()
                .attach_views(&self.inbox, viewer());
            self.occasional_mut().identity_views = Some(views);
        }
        for uri in filter.resource_subscriptions.iter().flatten() {
            self.inbox.add_interest(uri);
            self.shared.metrics.subscriptions.inc();
        }
        for task in filter.task_ids.iter().flatten() {
            self.inbox.add_task_interest(task);
        }
        let tag = subscription_meta(&id);
        let ack = format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{{"notifications":{},"_meta":{tag}}}}}"#,
            serde_json::to_string(&filter).unwrap_or_else(|_| "{}".into()),
        );
        tracing::debug!(session = self.id, id = %id, "listen stream opened");
        self.occasional_mut().listeners.insert(
            id,
            super::Listener {
                exchange,
                filter,
                tag,
            },
        );
        Ok(ack)
    }

    /// The subscriptions the connection holds, bounded together by
    /// `max_subscriptions_per_session`: its session-era `resources/subscribe`, and the
    /// resource URIs and task ids of its open listen streams.
    pub(super) fn subscriptions_held(&self) -> usize {
        let listened: usize = self
            .listeners()
            .map(|(_, listener)| listener.filter.held())
            .sum();
        self.subscriptions().count() + listened
    }

    /// Lets go of what a listen stream held.
    pub(super) fn forget_listener(&mut self, listener: &super::Listener) {
        for uri in listener.filter.resource_subscriptions.iter().flatten() {
            self.inbox.drop_interest(uri);
            self.shared.metrics.subscriptions.dec();
        }
        for task in listener.filter.task_ids.iter().flatten() {
            self.inbox.drop_task_interest(task);
        }
        // The last listen gone, its identity's views are no longer heard of (the session
        // would be told of their changes for nothing).
        if self.listeners().next().is_none() {
            if let Some(occasional) = self.occasional.as_mut() {
                occasional.identity_views = None;
            }
        }
    }

    /// Reads again the records of the tasks the session's listen streams follow, off the
    /// session's turn, and gives the session each status that is not the last it was given
    /// (`Inbox::mark_task_reread`), sent as any other (`tasks_changed`): the node's bus was
    /// down, and a task may have changed, or ended, unheard (attack run 52b, F5: its stream
    /// stayed open for good). Only when the bus comes back: the normal path reads nothing.
    /// Bounded by the tasks the session may follow (`max_subscriptions_per_session`), one
    /// read each.
    pub(super) fn reread_followed_tasks(&self) {
        let ids = self.inbox.followed_tasks();
        if ids.is_empty() {
            return;
        }
        let inbox = Rc::downgrade(&self.inbox);
        let shared = self.shared.clone();
        actix_rt::spawn(async move {
            for id in ids {
                let Some(record) = crate::cluster::tasks::reread(&shared.cluster, &id).await else {
                    continue;
                };
                // The session ended meanwhile: nobody to tell.
                let Some(inbox) = inbox.upgrade() else {
                    return;
                };
                inbox.mark_task_reread(&Arc::new(crate::cluster::tasks::note_of(&record)));
            }
        });
    }

    /// Sends each stored task status to the listen streams that follow the task, for the
    /// identity it belongs to (`notifications/tasks`: what `tasks/get` would show).
    pub(super) fn tasks_changed(
        &self,
        notes: &[Arc<crate::mailbox::inbox::TaskNote>],
        out: &mut dyn super::Outlet,
    ) {
        let subject = self.admission.identity.principal();
        let access = &self.admission.access;
        // As `tasks/get` would: a task of a tool this credential may not use is not heard of.
        let visible = |n: &&Arc<crate::mailbox::inbox::TaskNote>| {
            n.owner == subject && access.may_use_tool(&n.tool)
        };
        for note in notes.iter().filter(visible) {
            for (_, listener) in self.listeners() {
                if listener.filter.follows(&note.id) {
                    let frame = format!(
                        r#"{{"jsonrpc":"2.0","method":"{}","params":{{"_meta":{},{}}}}}"#,
                        crate::protocol::mcp::notifications::TASKS,
                        listener.tag,
                        members(&note.fields),
                    );
                    out.send(frame, super::Route::During(listener.exchange));
                }
            }
        }
    }

    /// `tasks/get`, `tasks/update`, `tasks/cancel`: for a request that declares the tasks
    /// extension, the store operation in a worker (it may wait on Redis).
    fn prepare_task_method(
        &self,
        method: Method,
        params: Option<&RawValue>,
        stateless: StatelessRequest,
    ) -> Result<super::dispatch::WorkerJob, Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct TaskParams {
            task_id: String,
            #[serde(default)]
            input_responses: Option<Value>,
        }
        if !crate::cluster::tasks::declared(&stateless.info.client_capabilities) {
            return Err(Error::MissingClientCapability {
                required: crate::protocol::mcp::required_tasks_extension(),
            });
        }
        let p: TaskParams =
            crate::protocol::mcp::parse_object(params).map_err(Error::InvalidParams)?;
        let responses = match (method, p.input_responses) {
            (Method::TasksUpdate, Some(Value::Object(responses))) => responses,
            (Method::TasksUpdate, _) => {
                return Err(Error::InvalidParams(
                    "inputResponses: must be an object".into(),
                ))
            }
            _ => Map::new(),
        };
        let owner = stateless.info.identity.principal().to_owned();
        // The access it is served with (its session's, or on a connection without one its
        // own): a task is for the credentials that may call its tool, and one that may not is
        // answered as its `tools/call` would be.
        let access = self.admission.access.clone();
        let shared = self.shared.clone();
        let task_id = p.task_id;
        let work = crate::worker::Work::new(move |id, _ctx| {
            Box::pin(async move {
                use crate::cluster::tasks;
                let check_tool = |tool: &str| access.check_tool(tool);
                let cluster = &shared.cluster;
                let result = match method {
                    Method::TasksGet => tasks::load_shown(cluster, &task_id, &owner, &check_tool)
                        .await?
                        .fields(true),
                    Method::TasksUpdate => {
                        tasks::update(cluster, &task_id, &owner, &check_tool, responses).await?;
                        Map::new()
                    }
                    _ => {
                        tasks::cancel(cluster, &task_id, &owner, &check_tool).await?;
                        Map::new()
                    }
                };
                stateless_answer(&shared.stateless, &id, "complete", &result, "", None, 64)
            })
        });
        self.store_job(work, stateless, method_label(method))
    }
}

/// The members of a JSON object's text, without its braces.
fn members(object: &str) -> &str {
    object
        .trim()
        .strip_prefix('{')
        .and_then(|o| o.strip_suffix('}'))
        .unwrap_or("")
}

fn method_label(method: Method) -> &'static str {
    match method {
        Method::TasksGet => "tasks/get",
        Method::TasksUpdate => "tasks/update",
        _ => "tasks/cancel",
    }
}

/// What a `subscriptions/listen` stream asks for (and, acknowledged, what it gets).
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ListenFilter {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    tools_list_changed: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    prompts_list_changed: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    resources_list_changed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    resource_subscriptions: Option<Vec<String>>,
    /// Tasks whose status changes the stream wants (`notifications/tasks`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    task_ids: Option<Vec<String>>,
}

impl ListenFilter {
    /// The `list_changed` notifications these changes make for this stream.
    pub(super) fn changed(
        &self,
        changes: crate::mailbox::inbox::Changes,
    ) -> impl Iterator<Item = &'static str> {
        use crate::mailbox::inbox::Changes;
        use crate::protocol::mcp::notifications;
        [
            (
                self.tools_list_changed,
                Changes::TOOLS,
                notifications::TOOLS_LIST_CHANGED,
            ),
            (
                self.resources_list_changed,
                Changes::RESOURCES,
                notifications::RESOURCES_LIST_CHANGED,
            ),
            (
                self.prompts_list_changed,
                Changes::PROMPTS,
                notifications::PROMPTS_LIST_CHANGED,
            ),
        ]
        .into_iter()
        .filter(move |(wanted, change, _)| *wanted && changes.contains(*change))
        .map(|(_, _, method)| method)
    }

    /// The subscriptions this stream holds: its resource URIs and task ids.
    pub(super) fn held(&self) -> usize {
        self.resource_subscriptions.as_ref().map_or(0, Vec::len)
            + self.task_ids.as_ref().map_or(0, Vec::len)
    }

    /// The resource URIs this stream watches (counted in `mcp_subscriptions`).
    pub(super) fn watched(&self) -> usize {
        self.resource_subscriptions.as_ref().map_or(0, Vec::len)
    }

    /// Whether this stream follows the task `id`.
    pub(super) fn follows(&self, id: &str) -> bool {
        self.task_ids
            .as_ref()
            .is_some_and(|ids| ids.binary_search_by(|t| t.as_str().cmp(id)).is_ok())
    }

    /// Whether this stream wants updates of `uri`.
    pub(super) fn watches(&self, uri: &str) -> bool {
        self.resource_subscriptions
            .as_ref()
            .is_some_and(|uris| uris.binary_search_by(|u| u.as_str().cmp(uri)).is_ok())
    }
}

/// A listen stream's notification: `method`, tagged, with the `uri` of an update.
pub(super) fn tagged(method: &str, tag: &str, uri: Option<&str>) -> String {
    match uri {
        None => format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":{{"_meta":{tag}}}}}"#),
        Some(uri) => format!(
            r#"{{"jsonrpc":"2.0","method":"{method}","params":{{"_meta":{tag},"uri":{}}}}}"#,
            json!(uri)
        ),
    }
}

/// `{"io.modelcontextprotocol/subscriptionId": <id>}`, for the result that ends a stream.
pub(super) fn tag_value(id: &RequestId) -> Value {
    serde_json::from_str(&subscription_meta(id)).unwrap_or_default()
}

/// Whether a 2026-07-28 request may call `method` on a server offering `offers`.
fn serves_stateless(method: Method, offers: Offers) -> bool {
    use crate::protocol::mcp::Capability;
    match method {
        Method::Initialize
        | Method::Ping
        | Method::LoggingSetLevel
        | Method::ResourcesSubscribe
        | Method::ResourcesUnsubscribe => false,
        Method::Discover => true,
        Method::TasksGet | Method::TasksUpdate | Method::TasksCancel => offers.tasks,
        // Listening needs something to listen to.
        Method::SubscriptionsListen => offers.tools || offers.resources || offers.prompts,
        other => match other.capability() {
            None | Some(Capability::Logging) => true,
            Some(Capability::Tools) => offers.tools,
            Some(Capability::Resources) => offers.resources,
            Some(Capability::Prompts) => offers.prompts,
            Some(Capability::Completions) => offers.completions,
        },
    }
}

/// The `InputRequiredResult` of a request that asked `asks`, with the state that carries its
/// answers so far into the next round.
///
/// # Errors
/// -32602 when the state, with the request's target and arguments, would not fit in a
/// message of `max_message_bytes`: the client could never send the next round (it would be
/// refused as too big, a WebSocket closed with 1009), so it is told now and why.
fn input_required(
    shape: &StatelessShape,
    parts: &BindingParts,
    answers: Map<String, Value>,
    asks: Vec<Ask>,
    max_message_bytes: usize,
) -> Result<String, Error> {
    let outstanding: Vec<String> = asks.iter().map(|a| a.key.clone()).collect();
    let requests: Map<String, Value> = asks
        .into_iter()
        .map(|ask| {
            (
                ask.key,
                json!({ "method": ask.method, "params": ask.params }),
            )
        })
        .collect();
    let state = shape.state_key.issue(parts.binding(), answers, outstanding);
    let retry_bytes = state.len().saturating_add(parts.retry_bytes());
    if retry_bytes >= max_message_bytes {
        return Err(Error::RequestStateTooLarge {
            retry_bytes,
            limit: max_message_bytes,
        });
    }
    let body = json!({ "inputRequests": requests, "requestState": state }).to_string();
    Ok(stateless_result(shape, &body, "", None, "input_required"))
}

/// The distinct entries of a listen's list, or `None` when it names more than `max`
/// (read no further than the first past it: a list may fill a whole message).
fn distinct_at_most(listed: Vec<String>, max: usize) -> Option<std::collections::HashSet<String>> {
    let mut distinct = std::collections::HashSet::new();
    for entry in listed {
        if distinct.len() == max && !distinct.contains(&entry) {
            return None;
        }
        distinct.insert(entry);
    }
    Some(distinct)
}

/// The request id's JSON, for tagging a listen stream's notifications.
pub(super) fn subscription_meta(id: &RequestId) -> String {
    format!(r#"{{"{SUBSCRIPTION_ID_META}":{}}}"#, id.as_json())
}

/// The last value parsed from a `_meta` member, with the text it came from. A client sends
/// the same `clientInfo` and capabilities with every 2026-07-28 request, so a request
/// carrying the same text reuses the parsed value instead of parsing it again. Clones of a
/// [`shared`](Self::shared) one share its entry. A default one makes its entry when first
/// used: a session-era session, which most never do, holds a pointer and no allocation.
pub(super) struct LastParsed<T>(std::cell::OnceCell<Rc<std::cell::RefCell<Option<Parsed<T>>>>>);

/// A parsed value and the text it came from.
type Parsed<T> = (Box<str>, Arc<T>);

impl<T> Default for LastParsed<T> {
    fn default() -> Self {
        Self(std::cell::OnceCell::new())
    }
}

impl<T> Clone for LastParsed<T> {
    fn clone(&self) -> Self {
        let clone = Self::default();
        if let Some(entry) = self.0.get() {
            let _ = clone.0.set(entry.clone());
        }
        clone
    }
}

/// The `_meta` caches (`clientInfo`, capabilities) a thread's sessions of one request
/// share: such a session serves one 2026-07-28 POST, so a cache of its own would never be
/// read.
pub(super) type ParseCaches = (
    LastParsed<crate::model::Implementation>,
    LastParsed<serde_json::Value>,
);

thread_local! {
    static STATELESS_PARSE_CACHES: ParseCaches = (LastParsed::shared(), LastParsed::shared());
}

/// This thread's [`ParseCaches`] for sessions of one request.
pub(super) fn stateless_parse_caches() -> ParseCaches {
    STATELESS_PARSE_CACHES.with(|(info, capabilities)| (info.clone(), capabilities.clone()))
}

impl<T> LastParsed<T> {
    /// One whose clones share its entry.
    fn shared() -> Self {
        Self(std::cell::OnceCell::from(Rc::default()))
    }

    /// The value of `text`: the kept one when `text` is the same, else `parse(text)` (kept
    /// in its place); `None` when it does not parse.
    fn get_or_parse(&self, text: &str, parse: impl FnOnce(&str) -> Option<T>) -> Option<Arc<T>> {
        let mut last = self.0.get_or_init(Rc::default).borrow_mut();
        if let Some((kept, value)) = &*last {
            if **kept == *text {
                return Some(value.clone());
            }
        }
        let value = Arc::new(parse(text)?);
        *last = Some((Box::from(text), value.clone()));
        Some(value)
    }
}

/// Whether raw params that did not read name the 2026-07-28 version key in their `_meta`.
/// Most are ruled out by a scan, as HTTP rules bodies out: the key cannot be written
/// without its own bytes or an escape (`io.modelcontextprotocol\/protocolVersion`, as PHP
/// writes it). The rest are read leniently: each `_meta` (a member named twice is each of
/// its values), each of its members' names unescaped.
fn names_version_key(params: &Params<'_, crate::protocol::mcp::CallToolParams<'_>>) -> bool {
    use crate::protocol::mcp::META_PROTOCOL_VERSION;
    use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
    use std::borrow::Cow;

    /// Whether an object (params, or a `_meta`) has the key, in itself (`meta`) or in a
    /// `_meta` member. A value that is not an object has none (a `_meta` named twice may be
    /// `null` once).
    struct Names {
        meta: bool,
    }
    impl<'de> Visitor<'de> for Names {
        type Value = bool;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("any value")
        }
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(false)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
            let mut names = false;
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                if self.meta {
                    names |= key == META_PROTOCOL_VERSION;
                    map.next_value::<IgnoredAny>()?;
                } else if key == "_meta" {
                    names |= map.next_value_seed(Names { meta: true })?;
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(names)
        }
    }
    impl<'de> serde::de::DeserializeSeed<'de> for Names {
        type Value = bool;
        fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
            deserializer.deserialize_any(self)
        }
    }

    let Params::Raw(Some(raw)) = params else {
        return false;
    };
    let text = raw.get();
    let may = text.contains(META_PROTOCOL_VERSION) || text.contains('\\');
    may && serde::de::DeserializeSeed::deserialize(
        Names { meta: false },
        &mut serde_json::Deserializer::from_str(text),
    )
    .unwrap_or(false)
}

/// The `protocolVersion` an `initialize` asks for (at most 64 characters), or `""`.
fn requested_in_initialize(
    params: &Params<'_, crate::protocol::mcp::CallToolParams<'_>>,
) -> String {
    #[derive(Deserialize)]
    struct Asked<'a> {
        #[serde(borrow, rename = "protocolVersion")]
        protocol_version: Option<std::borrow::Cow<'a, str>>,
    }
    match params {
        Params::Raw(Some(raw)) => serde_json::from_str::<Asked<'_>>(raw.get())
            .ok()
            .and_then(|asked| asked.protocol_version)
            .map(|v| v.chars().take(64).collect())
            .unwrap_or_default(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_said_of_unreadable_params_is_short_and_without_position() {
        let read = |text: &str| {
            let raw: Box<RawValue> = serde_json::from_str(text).expect("JSON");
            let error = crate::protocol::mcp::RawParamsHead::read(Some(&raw))
                .map(|_| ())
                .expect_err("does not read");
            unreadable_params(&error)
        };
        assert_eq!(
            read(r#"{"name":"a","name":"b"}"#),
            "params do not read: duplicate field `name`"
        );
        let long = read(&format!(r#"{{"_meta":"{}"}}"#, "é".repeat(100_000)));
        assert!(long.len() <= 200 + 40, "{} bytes", long.len());
        assert!(long.ends_with('…'), "{long}");
    }

    #[test]
    fn one_request_sessions_share_their_threads_parse_caches_and_others_keep_their_own() {
        let parse = |text: &str| serde_json::from_str::<Value>(text).ok();
        let text = r#"{"sampling":{}}"#;
        // Two sessions of one request on this thread: what the first parsed, the second
        // gets without parsing (the same value).
        let (_, first) = stateless_parse_caches();
        let (_, second) = stateless_parse_caches();
        let parsed = first.get_or_parse(text, parse).expect("parses");
        let again = second.get_or_parse(text, |_| panic!("parsed a second time"));
        assert!(Arc::ptr_eq(&parsed, &again.expect("kept")));
        // A session-era session's cache (made on first use) is its own: it parses, and its
        // clones made after that share its entry.
        let own = LastParsed::<Value>::default();
        let own_parsed = own.get_or_parse(text, parse).expect("parses");
        assert!(!Arc::ptr_eq(&parsed, &own_parsed));
        let clone = own.clone();
        let from_clone = clone.get_or_parse(text, |_| panic!("parsed a second time"));
        assert!(Arc::ptr_eq(&own_parsed, &from_clone.expect("kept")));
    }

    #[test]
    fn stateless_results_lead_with_result_type_and_identity() {
        let shape = StatelessShape::new(
            &crate::model::Implementation::new("srv", "1"),
            crate::protocol::mrtr::StateKey::new(Some("k"), std::time::Duration::from_secs(1)),
        );
        let result = stateless_result(&shape, r#"{"tools":[]}"#, r#","ttlMs":0"#, None, "complete");
        let value: Value = serde_json::from_str(&result).expect("json");
        assert_eq!(value["resultType"], "complete");
        assert_eq!(
            value["_meta"][super::super::shape::SERVER_INFO_META]["name"],
            "srv"
        );
        assert_eq!(value["tools"], json!([]));
        assert_eq!(value["ttlMs"], 0);
        let empty = stateless_result(&shape, "{}", "", Some(&json!({"x": 1})), "complete");
        let value: Value = serde_json::from_str(&empty).expect("json");
        assert_eq!(value["_meta"]["x"], 1);
        assert_eq!(
            value["_meta"][super::super::shape::SERVER_INFO_META]["version"],
            "1"
        );
    }
}
