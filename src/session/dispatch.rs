//! Routing a request by method: the lifecycle gate, the method table checked against what
//! the session negotiated, the cheap methods answered inline (so `ping` and lists answer at
//! once under load), and the admission of everything that runs user code (a tool call, a
//! resource read, a prompt render, a completion) into a worker actor.

use super::era::Era;
use super::shape::{stateless_answer, stateless_result, StatelessRequest};
use super::{HeldToken, InFlight, Negotiated, Phase, Request, Session};
use crate::cluster::dedup::recent::RequestHash;
use crate::cluster::dedup::{AnonymousScope, AnswerShape, Idempotency};
use crate::cluster::tasks::runner::{Begun, TaskCall};
use crate::context::{ClientRequestError, Input, LogFloor, SessionInfo};
use crate::model::{Completion, ForVersion, Implementation};
use crate::observe::access::{Clean, RequestRecord};
use crate::perimeter::signature::Passed;
use crate::protocol::jsonrpc::{
    encode_result, encode_result_with, Params, RequestId, MAX_ID_BYTES,
};
use crate::protocol::mcp::{
    parse_object, quoted, server_capabilities, CallToolParams, CompleteParams, CompleteRef, Error,
    GetPromptParams, ListParams, LogLevel, Method, ProgressToken, ProtocolVersion,
    ReadResourceParams, SetLevelParams, SubscribeParams,
};
use crate::protocol::mrtr::BindingParts;
use crate::registry::Page;
use crate::registry::{ListKind, ResourceTarget, Viewer, ViewerRef};
use crate::resource::{CompletionRequest, ResourceError};
use crate::tool::Arguments;
use crate::tool::{TaskSupport, ToolError};
use crate::worker::OnInput;
use crate::worker::{Job, Outcome, RequestWorker, ToolCall, Work};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use std::borrow::Cow;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// How a request is served.
// Returned by value once per request and consumed at once, never stored: boxing the large
// variant would cost an allocation on every tool call to save a move.
#[allow(clippy::large_enum_variant)]
pub(super) enum Dispatch {
    /// Answered: the serialized result.
    Inline(String),
    /// To run in a worker.
    Worker(WorkerJob),
    /// A `subscriptions/listen` stream, open until the client cancels it or the server ends
    /// it (no answer now): its acknowledgement, to send first.
    Listening(String),
}

/// A request checked and ready to run in a worker.
pub(super) struct WorkerJob {
    /// How it runs: session request or stateless 2026-07-28 request.
    era: RequestEra,
    work: Work,
    timeout: Duration,
    progress_token: Option<Box<HeldToken>>,
    /// The request's own trace id, when its `_meta` carried a `traceparent`.
    trace_id: Option<Box<str>>,
    /// What runs, for the worker's span: a tool's name (only when debug logs are on: it is
    /// a copy), or the method.
    label: Cow<'static, str>,
    /// What the request was, for the session's store of finished requests (`tools/call`
    /// with de-duplication on).
    replay: Option<RequestHash>,
    /// The request's idempotency key, when it carries one (a layer of its stack). Boxed:
    /// few requests carry one, and every job is moved a few times on its way to its worker.
    idempotency: Option<Box<Idempotency>>,
}

const EMPTY_RESULT: &str = "{}";

/// Where the `initialize` result tells a WebSocket client its session id, for a resume.
pub const RESUME_ID_META: &str = "mcp-ws/sessionId";

impl Session {
    /// Routes a request of either era: `stateless` is what a 2026-07-28 request's `_meta`
    /// established (`None` for a session-era request, served by the session's state).
    pub(super) fn route(
        &mut self,
        request: &Request<'_>,
        era: Era,
        exchange: u64,
        batch: Option<u64>,
    ) -> Result<Dispatch, Error> {
        if let Era::Stateless(stateless) = era {
            return self.route_stateless(request, stateless, exchange, batch);
        }
        let method = Method::parse(&request.method);
        // Only `tools/call` params come parsed (`CallToolParams` is the eager type).
        let params = match request.params {
            Params::Raw(raw) => raw,
            Params::Parsed(_) => None,
        };
        let negotiated = match (&self.phase, method) {
            // 2025-03-26, lifecycle: "The initialize request MUST NOT be part of a JSON-RPC batch".
            (_, Some(Method::Initialize)) if batch.is_some() => {
                return Err(Error::invalid_request(
                    "initialize must not be sent in a batch",
                ))
            }
            (Phase::AwaitingInit, Some(Method::Initialize)) => {
                return self.initialize(params).map(Dispatch::Inline)
            }
            (Phase::AwaitingInit, Some(Method::Ping)) => return ping(params).map(Dispatch::Inline),
            (Phase::AwaitingInit, _) => return Err(Error::NotInitialized),
            (Phase::Ready(negotiated), _) => negotiated,
        };
        let version = negotiated.version;
        let method = match method {
            Some(method) if negotiated.serves(method) => method,
            _ => {
                return Err(Error::MethodNotFound {
                    method: request.method.clone().into_owned(),
                })
            }
        };
        let inline = match method {
            Method::Initialize => {
                return Err(Error::invalid_request("the session is already initialized"))
            }
            Method::Ping => ping(params)?,
            Method::ToolsCall => {
                return self
                    .prepare_tool_call(&request.params, Era::Session)
                    .map(Dispatch::Worker)
            }
            Method::ResourcesRead => {
                return self
                    .prepare_read(params, Era::Session)
                    .map(Dispatch::Worker)
            }
            Method::PromptsGet => {
                return self
                    .prepare_prompt(params, Era::Session)
                    .map(Dispatch::Worker)
            }
            Method::CompletionComplete => return self.prepare_completion(params, Era::Session),
            // `serves` keeps 2026-07-28 methods from session-era sessions.
            Method::Discover
            | Method::SubscriptionsListen
            | Method::TasksGet
            | Method::TasksUpdate
            | Method::TasksCancel => {
                return Err(Error::MethodNotFound {
                    method: request.method.clone().into_owned(),
                })
            }
            Method::ToolsList => self.list(ListKind::Tools, version, params)?,
            Method::ResourcesList => self.list(ListKind::Resources, version, params)?,
            Method::ResourceTemplatesList => {
                self.list(ListKind::ResourceTemplates, version, params)?
            }
            Method::PromptsList => self.list(ListKind::Prompts, version, params)?,
            Method::ResourcesSubscribe => {
                let p: SubscribeParams<'_> = parse_params(params)?;
                let limits = &self.shared.settings.limits;
                let refused = &self.shared.metrics.rejections.subscriptions;
                if p.uri.len() > limits.max_subscription_uri_bytes {
                    refused.inc();
                    return Err(Error::SubscriptionUriTooLong {
                        limit: limits.max_subscription_uri_bytes,
                    });
                }
                let viewer = self.viewer(&Era::Session);
                let access = &self.admission.access;
                // Held as the spelling that found the resource: its updates name that one.
                let uri = match self
                    .shared
                    .registry
                    .find_resource(&p.uri, viewer, |uri| access.may_use_resource(uri))
                {
                    Some((uri, _)) => uri.into_owned(),
                    None => {
                        return Err(Error::ResourceNotFound {
                            uri: p.uri.into_owned(),
                        })
                    }
                };
                let max = limits.max_subscriptions_per_session;
                // What the connection's 2026-07-28 listens hold counts too: one limit for
                // all a connection holds.
                let held = self.subscriptions_held();
                let subscriptions = &mut self
                    .occasional
                    .get_or_insert_with(Box::default)
                    .subscriptions;
                if !subscriptions.contains(&uri) {
                    if held >= max {
                        refused.inc();
                        return Err(Error::TooManySubscriptions { limit: max });
                    }
                    self.inbox.add_interest(&uri);
                    subscriptions.insert(uri);
                    self.shared.metrics.subscriptions.inc();
                    self.revision += 1;
                }
                EMPTY_RESULT.into()
            }
            Method::ResourcesUnsubscribe => {
                let p: SubscribeParams<'_> = parse_params(params)?;
                // As the client spelled it, or as it was held (see `ResourcesSubscribe`).
                let held = self.occasional.as_mut().and_then(|o| {
                    o.subscriptions.take(p.uri.as_ref()).or_else(|| {
                        let normal = crate::resource::normalized_uri(&p.uri);
                        o.subscriptions.take(normal.as_ref())
                    })
                });
                if let Some(uri) = held {
                    self.inbox.drop_interest(&uri);
                    self.shared.metrics.subscriptions.dec();
                    self.revision += 1;
                }
                EMPTY_RESULT.into()
            }
            Method::LoggingSetLevel => {
                let p: SetLevelParams<'_> = parse_params(params)?;
                let level = LogLevel::parse(&p.level).ok_or_else(|| {
                    Error::InvalidParams(format!("level: unknown log level {}", quoted(&p.level)))
                })?;
                self.inbox.set_log_level(level);
                self.revision += 1;
                EMPTY_RESULT.into()
            }
        };
        Ok(Dispatch::Inline(inline))
    }

    fn initialize(&mut self, params: Option<&RawValue>) -> Result<String, Error> {
        // What the client describes itself with is kept for the session's life (and in its
        // record in Redis): bounded, where the message limit alone would let one address hold
        // gigabytes in sessions that each keep megabytes.
        if let Some(raw) =
            params.filter(|raw| raw.get().len() > super::MAX_CLIENT_DESCRIPTION_BYTES)
        {
            return Err(Error::InvalidParams(format!(
                "initialize: params of {} bytes; at most {} (clientInfo and capabilities are \
                 kept for the session's life)",
                raw.get().len(),
                super::MAX_CLIENT_DESCRIPTION_BYTES
            )));
        }
        let p: InitializeParams<'_> = parse_params(params)?;
        // A connection pinned to a session-era version gets that one, whatever is asked.
        let version = match self.pinned {
            Some(pinned) if !pinned.is_stateless() => pinned,
            _ => ProtocolVersion::negotiate(&p.protocol_version),
        };
        let offers = self.shared.registry.offers();
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct InitializeResult<'a> {
            protocol_version: &'a str,
            capabilities: Value,
            server_info: ForVersion<'a, Implementation>,
            #[serde(skip_serializing_if = "Option::is_none")]
            instructions: Option<&'a str>,
            #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
            meta: Option<Value>,
        }
        let result = serde_json::to_string(&InitializeResult {
            protocol_version: version.as_str(),
            capabilities: server_capabilities(version, offers),
            server_info: ForVersion(&self.shared.server_info, version),
            instructions: self.shared.instructions.as_deref(),
            meta: self
                .shared_id
                .as_ref()
                .filter(|_| self.announce_id)
                .map(|id| serde_json::json!({ RESUME_ID_META: id.as_str() })),
        })
        .map_err(|_| Error::Internal)?;
        // The client's strings cut and escaped as the access log's are.
        tracing::info!(
            session = self.id,
            client = %Clean(&p.client_info.name),
            client_version = %Clean(&p.client_info.version),
            requested = %Clean(&p.protocol_version),
            negotiated = %version,
            identity = %Clean(self.admission.identity.subject()),
            trace = %self.admission.trace_id,
            "session initialized"
        );
        let info = Rc::new(SessionInfo {
            protocol_version: version,
            client_capabilities: Arc::new(Value::Object(p.capabilities)),
            client_info: Arc::new(p.client_info),
            identity: self.admission.identity.clone(),
            trace_id: self.admission.trace_id.clone(),
            scope: Some(crate::context::SessionScope::new(self.id)),
        });
        self.shared.session_initialized(&info);
        self.phase = Phase::Ready(Negotiated {
            version,
            offers,
            info,
        });
        // A listen of this connection (2026-07-28) registered it as its identity's viewer:
        // while one is open, it goes on hearing of its identity's views beside the session's.
        if self.bus.is_some() && self.listeners().next().is_some() {
            let viewer = Viewer::Identity(Arc::from(self.admission.identity.principal()));
            let views = self.shared.registry.bus().attach_views(&self.inbox, viewer);
            self.occasional_mut().identity_views = Some(views);
        }
        // From now on the session hears of list changes and resource updates.
        self.bus = Some(
            self.shared
                .registry
                .bus()
                .attach(&self.inbox, Viewer::Session(self.id)),
        );
        self.revision += 1;
        Ok(result)
    }

    fn list(
        &self,
        kind: ListKind,
        version: ProtocolVersion,
        params: Option<&RawValue>,
    ) -> Result<String, Error> {
        Ok(self
            .list_page(kind, version, params, self.viewer(&Era::Session))?
            .to_result(kind.member()))
    }

    /// Whose views a request of `era` sees: its session's, or (2026-07-28, a session of its
    /// own) its identity's.
    pub(super) fn viewer(&self, era: &Era) -> ViewerRef<'_> {
        match era {
            Era::Session => ViewerRef::Session(self.id),
            Era::Stateless(_) => self.identity_viewer(),
        }
    }

    /// The viewer of this connection's 2026-07-28 requests: its identity.
    pub(super) fn identity_viewer(&self) -> ViewerRef<'_> {
        ViewerRef::Identity(self.admission.identity.principal())
    }

    /// One page of a list, after the request's cursor.
    pub(super) fn list_page(
        &self,
        kind: ListKind,
        version: ProtocolVersion,
        params: Option<&RawValue>,
        viewer: ViewerRef<'_>,
    ) -> Result<Page, Error> {
        let p: ListParams<'_> = parse_params(params)?;
        let page_size = self.shared.settings.limits.page_size;
        // What the client may not use is not listed to it.
        let access = &self.admission.access;
        let shows = |key: &str| access.shows(kind, key);
        let visible = (!access.is_unrestricted()).then_some(&shows as &dyn Fn(&str) -> bool);
        let chooser = self
            .shared
            .rollout
            .for_subject(self.admission.identity.subject());
        self.shared.registry.page(
            kind,
            version,
            p.cursor.as_deref(),
            page_size,
            visible,
            (&chooser, viewer),
        )
    }

    /// The per-session cap, checked first and synchronously: an over-cap request is refused
    /// at once, before anything is looked up or copied.
    fn admit(&self) -> Result<(), Error> {
        let limit = self.shared.settings.limits.max_in_flight_per_session;
        if self.in_flight.len() >= limit {
            self.shared.metrics.rejections.session_busy.inc();
            return Err(Error::SessionBusy { limit });
        }
        Ok(())
    }

    /// How a request of either era runs: what its context knows of the client, which of its
    /// log lines go out, and how its asks reach the client. For a 2026-07-28 request that
    /// may ask (`binding` given), its earlier answers and state are checked here.
    fn request_era(
        &self,
        era: Era,
        binding: Option<(BindingParts, Option<&RawValue>, Option<&str>)>,
    ) -> Result<RequestEra, Error> {
        match era {
            Era::Session => {
                let Phase::Ready(negotiated) = &self.phase else {
                    // `route` admits nothing that runs before `initialize`.
                    return Err(Error::Internal);
                };
                Ok(RequestEra {
                    info: negotiated.info.clone(),
                    log_floor: LogFloor::Session,
                    input: Input::Session,
                    on_input: None,
                    stateless: false,
                })
            }
            Era::Stateless(stateless) => {
                let (input, on_input) = match binding {
                    Some((binding, responses, state)) => {
                        let (input, on_input) = self.rounds(binding, responses, state)?;
                        (input, Some(on_input))
                    }
                    // Completions may not ask (they have no `input_required` round): an
                    // ask fails at once, as if the client could not answer it.
                    None => (Input::Refused, None),
                };
                Ok(RequestEra {
                    info: stateless.info,
                    log_floor: LogFloor::Request(stateless.log_level),
                    input,
                    on_input,
                    stateless: true,
                })
            }
        }
    }

    pub(super) fn prepare_tool_call(
        &self,
        params: &Params<'_, CallToolParams<'_>>,
        era: Era,
    ) -> Result<WorkerJob, Error> {
        self.admit()?;
        let parsed;
        let p = match params {
            Params::Parsed(p) => p,
            Params::Raw(raw) => {
                parsed = parse_params::<CallToolParams<'_>>(*raw)?;
                &parsed
            }
        };
        self.admission.access.check_tool(&p.name)?;
        let chooser = self
            .shared
            .rollout
            .for_subject(self.admission.identity.subject());
        let registry = &self.shared.registry;
        let (handler, task_support) = match &self.tool_cache {
            Some(cache) => {
                registry.cached_tool_handler(&p.name, &chooser, self.viewer(&era), cache)?
            }
            None => registry.tool_handler(&p.name, &chooser, self.viewer(&era))?,
        };
        let trace_id = p.meta.as_ref().and_then(|m| m.trace_id());
        // Remembered for a retry by id in its session: session-era requests only (see
        // `on_request`).
        let replay = era
            .stateless()
            .is_none()
            .then(|| self.recent.fingerprint(&p.name, p.arguments))
            .flatten();
        let arguments = Arguments::new(p.arguments);
        let binding = era.stateless().map(|m| {
            let binding = BindingParts::new(
                "tools/call",
                &p.name,
                p.arguments.map(RawValue::get),
                m.info.identity.principal(),
            );
            (binding, p.input_responses, p.request_state.as_deref())
        });
        let mut era = self.request_era(era, binding)?;
        let version = era.info.protocol_version;
        let idempotency = match p.meta.as_ref().and_then(|m| m.idempotency_key) {
            Some(key) if self.shared.settings.dedup.enabled => {
                // What its answer's shape depends on: the version (the era with it) and, for
                // a 2026-07-28 call that may become a task, whether the request declared
                // tasks. A retry of its key asking for another shape is a conflict, never
                // the first answer in a shape the retry cannot read (a task handle to a
                // session, a result without `resultType` to a 2026-07-28 request).
                let shape = AnswerShape {
                    version: version.as_str(),
                    task: era.stateless
                        && task_support != TaskSupport::Forbidden
                        && crate::cluster::tasks::declared(&era.info.client_capabilities),
                };
                let scope = match &self.shared_id {
                    Some(id) => AnonymousScope::Shared(id.as_str()),
                    None => AnonymousScope::Local(self.id),
                };
                Some(Box::new(Idempotency::of_tool_call(
                    &self.admission.identity,
                    scope,
                    key,
                    &p.name,
                    p.arguments,
                    [
                        p.request_state.as_deref(),
                        p.input_responses.map(RawValue::get),
                    ],
                    shape,
                )?))
            }
            _ => None,
        };
        let progress_token = self.fresh_progress_token(
            p.meta.as_ref().and_then(|m| m.progress_token),
            idempotency.as_deref(),
        )?;
        // A result is about as long as the arguments for pass-through tools (echo), and
        // short otherwise; the hint only sizes the frame's first allocation.
        let size_hint = arguments.len() + 64;
        let work: Work = if era.stateless && task_support != TaskSupport::Forbidden {
            self.task_call(
                &mut era,
                &p.name,
                handler,
                arguments,
                trace_id.clone(),
                task_support,
            )?
        } else if era.stateless {
            let shared = self.shared.clone();
            Work::new(move |id, ctx| {
                Box::pin(async move {
                    let outcome = handler.call(arguments, ctx).await;
                    stateless_call_answer(&shared, &id, outcome, version, size_hint)
                })
            })
        } else {
            Work::ToolCall(ToolCall {
                handler,
                arguments,
                answer: session_call_answer,
                version,
                size_hint,
            })
        };
        Ok(WorkerJob {
            work,
            idempotency,
            timeout: self.shared.settings.limits.timeout_for_tool(&p.name),
            progress_token,
            trace_id,
            label: if tracing::enabled!(tracing::Level::DEBUG) {
                Cow::Owned(p.name.clone().into_owned())
            } else {
                Cow::Borrowed("tools/call")
            },
            era,
            replay,
        })
    }

    /// The work of a 2026-07-28 call of a tool whose calls may become tasks (see
    /// `tasks::runner`). A request that does not declare the extension gets an ordinary
    /// call, or -32021 when the tool requires tasks.
    fn task_call(
        &self,
        era: &mut RequestEra,
        tool: &str,
        handler: Arc<dyn crate::tool::ToolHandler>,
        arguments: Arguments,
        trace_id: Option<Box<str>>,
        support: TaskSupport,
    ) -> Result<Work, Error> {
        let version = era.info.protocol_version;
        let shared = self.shared.clone();
        if !crate::cluster::tasks::declared(&era.info.client_capabilities) {
            if support == TaskSupport::Required {
                return Err(Error::MissingClientCapability {
                    required: crate::protocol::mcp::required_tasks_extension(),
                });
            }
            return Ok(Work::new(move |id, ctx| {
                Box::pin(async move {
                    let outcome = handler.call(arguments, ctx).await;
                    stateless_call_answer(&shared, &id, outcome, version, 128)
                })
            }));
        }
        // The call runs in a context of its own (it may outlive this request); the
        // request's round goes with it.
        let Input::Rounds(rounds) = std::mem::replace(&mut era.input, Input::Session) else {
            return Err(Error::Internal);
        };
        let on_input = era.on_input.take();
        let info = era.info.clone();
        let asks = Rc::new(crate::context::TaskAsks::new(rounds));
        let tool: Box<str> = tool.into();
        Ok(Work::new(move |id, _ctx| {
            Box::pin(async move {
                let call = TaskCall {
                    cluster: shared.cluster.clone(),
                    tool,
                    handler,
                    arguments,
                    request_id: id.clone(),
                    trace_id,
                    info,
                    asks,
                    support,
                };
                match crate::cluster::tasks::runner::begin(call).await? {
                    Begun::Done(outcome) => {
                        stateless_call_answer(&shared, &id, outcome, version, 128)
                    }
                    Begun::InputRequired(asks) => match on_input {
                        Some(answer) => answer(id, asks),
                        None => Err(Error::Internal),
                    },
                    Begun::Task(record) => stateless_answer(
                        &shared.stateless,
                        &id,
                        "task",
                        &record.fields(false),
                        "",
                        None,
                        128,
                    ),
                }
            })
        }))
    }

    /// A job for a 2026-07-28 request whose work only waits on the store (`tasks/*`).
    pub(super) fn store_job(
        &self,
        work: Work,
        stateless: StatelessRequest,
        label: &'static str,
    ) -> Result<WorkerJob, Error> {
        self.admit()?;
        let era = self.request_era(Era::Stateless(stateless), None)?;
        Ok(WorkerJob {
            work,
            timeout: self.shared.settings.limits.request_timeout(),
            progress_token: None,
            trace_id: None,
            label: Cow::Borrowed(label),
            era,
            replay: None,
            idempotency: None,
        })
    }

    pub(super) fn prepare_read(
        &self,
        params: Option<&RawValue>,
        era: Era,
    ) -> Result<WorkerJob, Error> {
        self.admit()?;
        let p: ReadResourceParams<'_> = parse_params(params)?;
        let access = &self.admission.access;
        let (uri, target) = self
            .shared
            .registry
            .find_resource(&p.uri, self.viewer(&era), |uri| {
                access.may_use_resource(uri)
            })
            .ok_or_else(|| Error::ResourceNotFound {
                uri: p.uri.clone().into_owned(),
            })?;
        let uri = uri.into_owned();
        let progress_token =
            self.fresh_progress_token(p.meta.as_ref().and_then(|m| m.progress_token), None)?;
        let trace_id = p.meta.as_ref().and_then(|m| m.trace_id());
        let binding = era.stateless().map(|m| {
            let binding =
                BindingParts::new("resources/read", &uri, None, m.info.identity.principal());
            (binding, p.input_responses, p.request_state.as_deref())
        });
        let era = self.request_era(era, binding)?;
        let version = era.info.protocol_version;
        let stateless = era.stateless.then(|| {
            (
                self.shared.clone(),
                self.cache_hints(self.shared.settings.cache.read_ttl_ms),
            )
        });
        let work = Work::new(move |id, ctx| {
            Box::pin(async move {
                let read = match target {
                    ResourceTarget::Fixed(resource) => resource.reader.read(&uri, ctx).await,
                    ResourceTarget::Templated(template, variables) => {
                        template.reader.read(&uri, variables, ctx).await
                    }
                };
                let contents = read.map_err(|e| resource_error(e, uri))?;
                #[derive(Serialize)]
                struct ReadResult<'a> {
                    contents: ForVersion<'a, Vec<crate::model::ResourceContents>>,
                }
                let result = ReadResult {
                    contents: ForVersion(&contents, version),
                };
                match stateless {
                    None => encode_result_with(&id, &result, 256).map_err(|_| Error::Internal),
                    Some((shared, hints)) => stateless_answer(
                        &shared.stateless,
                        &id,
                        "complete",
                        &result,
                        &hints,
                        None,
                        256,
                    ),
                }
            })
        });
        Ok(WorkerJob {
            work,
            timeout: self.shared.settings.limits.request_timeout(),
            progress_token,
            trace_id,
            label: Cow::Borrowed("resources/read"),
            era,
            replay: None,
            idempotency: None,
        })
    }

    pub(super) fn prepare_prompt(
        &self,
        params: Option<&RawValue>,
        era: Era,
    ) -> Result<WorkerJob, Error> {
        self.admit()?;
        let p: GetPromptParams<'_> = parse_params(params)?;
        self.admission.access.check_prompt(&p.name)?;
        let prompt = self
            .shared
            .registry
            .prompt(&p.name, self.viewer(&era))
            .ok_or_else(|| Error::UnknownPrompt {
                name: p.name.clone().into_owned(),
            })?;
        if let Some(missing) = prompt.missing_argument(&p.arguments) {
            return Err(Error::MissingPromptArgument {
                prompt: p.name.into_owned(),
                argument: missing.to_owned(),
            });
        }
        let progress_token =
            self.fresh_progress_token(p.meta.as_ref().and_then(|m| m.progress_token), None)?;
        let trace_id = p.meta.as_ref().and_then(|m| m.trace_id());
        let binding = match era.stateless() {
            Some(m) => {
                let arguments = serde_json::to_string(&p.arguments).map_err(|_| Error::Internal)?;
                let binding = BindingParts::new(
                    "prompts/get",
                    &p.name,
                    Some(&arguments),
                    m.info.identity.principal(),
                );
                Some((binding, p.input_responses, p.request_state.as_deref()))
            }
            None => None,
        };
        let era = self.request_era(era, binding)?;
        let arguments = p.arguments;
        let version = era.info.protocol_version;
        let shared = era.stateless.then(|| self.shared.clone());
        let work = Work::new(move |id, ctx| {
            Box::pin(async move {
                let rendered =
                    prompt
                        .renderer
                        .render(arguments, ctx)
                        .await
                        .map_err(|e| match e {
                            crate::prompt::PromptError::InvalidArgument(m) => {
                                Error::InvalidParams(m)
                            }
                            crate::prompt::PromptError::Failed(m) => Error::HandlerFailed(m),
                            crate::prompt::PromptError::Rpc(error) => error.into(),
                        })?;
                match shared {
                    None => encode_result_with(&id, &ForVersion(&rendered, version), 256)
                        .map_err(|_| Error::Internal),
                    Some(shared) => stateless_answer(
                        &shared.stateless,
                        &id,
                        "complete",
                        &ForVersion(&rendered, version),
                        "",
                        None,
                        256,
                    ),
                }
            })
        });
        Ok(WorkerJob {
            work,
            timeout: self.shared.settings.limits.request_timeout(),
            progress_token,
            trace_id,
            label: Cow::Borrowed("prompts/get"),
            era,
            replay: None,
            idempotency: None,
        })
    }

    pub(super) fn prepare_completion(
        &self,
        params: Option<&RawValue>,
        era: Era,
    ) -> Result<Dispatch, Error> {
        let p: CompleteParams = parse_params(params)?;
        let registry = &self.shared.registry;
        let unknown_argument = || {
            Error::InvalidParams(format!(
                "argument.name: no argument {} to complete",
                quoted(&p.argument.name)
            ))
        };
        let completer = match &p.reference {
            CompleteRef::Prompt { name } => {
                self.admission.access.check_prompt(name)?;
                let prompt = registry
                    .prompt(name, self.viewer(&era))
                    .ok_or_else(|| Error::UnknownPrompt { name: name.clone() })?;
                if !prompt.has_argument(&p.argument.name) {
                    return Err(unknown_argument());
                }
                prompt.completer
            }
            CompleteRef::Resource { uri } => {
                let template = registry
                    .resource_template(uri, self.viewer(&era))
                    .filter(|_| self.admission.access.may_use_resource(uri))
                    .ok_or_else(|| {
                        Error::InvalidParams(format!(
                            "ref.uri: unknown resource template {}",
                            quoted(uri)
                        ))
                    })?;
                if !template.has_variable(&p.argument.name) {
                    return Err(unknown_argument());
                }
                template.completer
            }
        };
        let shared = era.stateless().is_some().then(|| self.shared.clone());
        let answer = move |completion: Completion| -> String {
            let body = completion_result(completion);
            match &shared {
                None => body,
                Some(shared) => stateless_result(&shared.stateless, &body, "", None, "complete"),
            }
        };
        let Some(completer) = completer else {
            return Ok(Dispatch::Inline(answer(Completion::default())));
        };
        self.admit()?;
        let request = CompletionRequest {
            argument: p.argument.name,
            value: p.argument.value,
            context: p.context.map(|c| c.arguments).unwrap_or_default(),
        };
        let era = self.request_era(era, None)?;
        let work = Work::new(move |id, ctx| {
            Box::pin(async move {
                let values = completer.complete(request, ctx).await;
                Ok(encode_result(&id, &answer(Completion::new(values))))
            })
        });
        Ok(Dispatch::Worker(WorkerJob {
            work,
            timeout: self.shared.settings.limits.request_timeout(),
            progress_token: None,
            trace_id: None,
            label: Cow::Borrowed("completion/complete"),
            era,
            replay: None,
            idempotency: None,
        }))
    }

    /// The per-request stack, built here and only here, outermost first (as tower stacks its
    /// layers): the signature's nonce, claimed across nodes once the request is admitted (a
    /// replayed signature never reaches the rest) → idempotency (a retry with the same key
    /// gets the stored answer instead of running again) → the work itself (a tool, a read, a
    /// render; a call that may become a task runs through the task runner inside it). The
    /// worker that runs the whole stack adds the pool, the deadline and cancellation.
    fn stack(&self, passed: Passed, idempotency: Option<Box<Idempotency>>, work: Work) -> Work {
        let cluster = &self.shared.cluster;
        let work = match idempotency {
            Some(keyed) => (*keyed).wrap(cluster.clone(), work),
            None => work,
        };
        passed.guard_work(cluster, work)
    }

    /// Starts the worker of a job; the global pool is awaited inside the worker, and what the
    /// guard still asks (`passed`) before the work runs. The request's record moves into its
    /// in-flight entry.
    pub(super) fn start_worker(
        &mut self,
        id: RequestId,
        job: WorkerJob,
        passed: Passed,
        exchange: u64,
        batch: Option<u64>,
        record: &mut Option<RequestRecord>,
    ) -> Result<(), Error> {
        let Some(record) = record.take() else {
            // `on_request` hands over the record it began.
            return Err(Error::Internal);
        };
        let WorkerJob {
            work,
            timeout,
            progress_token,
            trace_id,
            label,
            era,
            replay,
            idempotency,
        } = job;
        let work = self.stack(passed, idempotency, work);
        // A child of the request span (session, id, method), which is entered here.
        let span = tracing::debug_span!(
            "worker",
            run = %label,
            trace = trace_id.as_deref().unwrap_or(&era.info.trace_id),
        );
        let stateless = era.stateless;
        self.last_serial += 1;
        let serial = self.last_serial;
        let worker = RequestWorker::run(Job {
            id: id.clone(),
            serial,
            received: record.started(),
            work,
            timeout,
            wants_progress: progress_token.is_some(),
            trace_id,
            inbox: self.inbox.clone(),
            session: era.info,
            input: era.input,
            log_floor: era.log_floor,
            on_input: era.on_input,
            pool: self.shared.pool.clone(),
            share: self.pool_share.clone(),
            span,
        });
        // The worker may already be done here, but its `Finished` waits in the inbox, which
        // is drained after this call returns: the entry is always in place first.
        self.in_flight.insert(
            id,
            InFlight {
                worker,
                serial,
                progress_token,
                exchange,
                batch,
                stateless,
                replay,
                record,
            },
        );
        self.shared.metrics.workers.inc();
        self.shared
            .metrics
            .session_in_flight
            .observe(self.in_flight.len() as u64);
        Ok(())
    }
}

/// The answer to a session-era `tools/call`: the tool's result (an `isError` one for a
/// failed tool), or the JSON-RPC error a tool passed on.
fn session_call_answer(
    id: &RequestId,
    outcome: Result<crate::model::CallToolResult, ToolError>,
    version: ProtocolVersion,
    size_hint: usize,
) -> Outcome {
    let result = match outcome {
        Ok(result) => result,
        Err(ToolError::Rpc(error)) => return Err(error.into()),
        Err(e) => e.into_result(),
    };
    encode_result_with(id, &ForVersion(&result, version), size_hint).map_err(|_| Error::Internal)
}

/// The answer to a 2026-07-28 `tools/call`: the tool's result (an `isError` one for a
/// failed tool); a tool that could not go on without a capability the request did not
/// declare fails the request, naming it (-32021).
fn stateless_call_answer(
    shared: &crate::session::shared::Shared,
    id: &RequestId,
    outcome: Result<crate::model::CallToolResult, ToolError>,
    version: ProtocolVersion,
    size_hint: usize,
) -> Result<String, Error> {
    let mut result = match outcome {
        Ok(result) => result,
        Err(ToolError::Client(ClientRequestError::NotSupported { capability })) => {
            return Err(Error::MissingClientCapability {
                required: crate::protocol::mcp::required_capabilities(capability),
            })
        }
        Err(ToolError::Rpc(error)) => return Err(error.into()),
        Err(e) => e.into_result(),
    };
    // The result's own `_meta` is merged with the server's identity into the one `_meta`
    // member; left in the body, it would be written a second time.
    let meta = result.meta.take();
    stateless_answer(
        &shared.stateless,
        id,
        "complete",
        &ForVersion(&result, version),
        "",
        meta.as_ref(),
        size_hint,
    )
}

/// How a request of one era or the other runs in its worker.
pub(super) struct RequestEra {
    info: Rc<SessionInfo>,
    log_floor: LogFloor,
    input: Input,
    on_input: Option<OnInput>,
    /// A 2026-07-28 request.
    stateless: bool,
}

impl Negotiated {
    /// Whether the session may call `method`: its capability was declared to this session.
    fn serves(&self, method: Method) -> bool {
        use crate::protocol::mcp::Capability;
        if method.is_stateless_only() {
            // 2026-07-28 methods: a session-era session does not have them.
            return false;
        }
        match method.capability() {
            None | Some(Capability::Logging) => true,
            Some(Capability::Tools) => self.offers.tools,
            Some(Capability::Resources) => self.offers.resources,
            Some(Capability::Prompts) => self.offers.prompts,
            Some(Capability::Completions) => {
                self.offers.completions && self.version.has_completions()
            }
        }
    }
}

fn completion_result(completion: Completion) -> String {
    #[derive(Serialize)]
    struct CompleteResult {
        completion: Completion,
    }
    serde_json::to_string(&CompleteResult { completion }).unwrap_or_default()
}

fn resource_error(error: ResourceError, uri: String) -> Error {
    match error {
        ResourceError::NotFound => Error::ResourceNotFound { uri },
        ResourceError::TooLarge { size, limit } => Error::ResourceTooLarge { uri, size, limit },
        ResourceError::Failed(message) => Error::HandlerFailed(message),
        ResourceError::Rpc(error) => error.into(),
        ResourceError::OverMessageLimit {
            size,
            encoded,
            limit,
        } => Error::ResourceOverMessageLimit {
            uri,
            size,
            encoded,
            limit,
        },
        ResourceError::Busy { scope, limit } => Error::ReadsBusy {
            scope: match scope {
                crate::resource::BusyScope::FileReads => crate::protocol::mcp::ReadLimit::Reads,
                crate::resource::BusyScope::FileBytes => crate::protocol::mcp::ReadLimit::Bytes,
            },
            limit,
        },
    }
}

impl Session {
    /// A request's progress token ([`progress_token`]), refused as well when a request in
    /// flight in this session (on this node) has it already, compared as written: the spec
    /// has tokens unique among active requests, and two requests' progress under one token
    /// made the client's go back and forth. A keyed request (`keyed`) may share its token
    /// with a request in flight of its own key: it joins that one's run, and runs nothing of
    /// its own while it runs (review 50: a keyed retry was refused). Told by the holder's
    /// key, not by whether the key runs on the node (review 54: a first request still
    /// waiting for a pool slot or its claim did not run yet, and its retry was refused; one
    /// holder of another key let the retry share its token).
    fn fresh_progress_token(
        &self,
        raw: Option<&RawValue>,
        keyed: Option<&Idempotency>,
    ) -> Result<Option<Box<HeldToken>>, Error> {
        let Some(token) = progress_token(raw)? else {
            return Ok(None);
        };
        let key = keyed.map(|keyed| *keyed.key());
        let text = token.as_raw().get();
        let in_use = self.in_flight.values().any(|entry| {
            entry.progress_token.as_ref().is_some_and(|held| {
                held.token.as_raw().get() == text && (key.is_none() || held.key != key)
            })
        });
        if in_use {
            return Err(Error::InvalidParams(
                "_meta.progressToken: a request in flight has it already".into(),
            ));
        }
        Ok(Some(Box::new(HeldToken { token, key })))
    }
}

/// A progress token from `_meta`, checked (a string or a number, of at most
/// [`MAX_ID_BYTES`]: it is copied into each of its request's progress notifications). One
/// refusal for both. Inlined: out of line, it cost every `tools/call` +40 instructions
/// (callgrind), its large `Result` written through memory.
#[inline(always)]
fn progress_token(raw: Option<&RawValue>) -> Result<Option<ProgressToken>, Error> {
    match raw {
        None => Ok(None),
        Some(raw) => ProgressToken::from_raw(raw)
            .filter(|_| raw.get().len() <= MAX_ID_BYTES)
            .map(Some)
            .ok_or_else(|| {
                Error::InvalidParams(
                    "_meta.progressToken: must be a string or a number of at most 1024 bytes"
                        .into(),
                )
            }),
    }
}

/// MCP params are named: an object (or absent, read as `{}`).
/// `ping`'s answer: `{}`, for params that are absent or an object, as for every method.
fn ping(params: Option<&RawValue>) -> Result<String, Error> {
    if params.is_some_and(|p| !p.get().starts_with('{')) {
        return Err(Error::InvalidParams("must be a JSON object".into()));
    }
    Ok(EMPTY_RESULT.into())
}

fn parse_params<'a, T: Deserialize<'a>>(params: Option<&'a RawValue>) -> Result<T, Error> {
    parse_object(params).map_err(Error::InvalidParams)
}

/// `initialize` params.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitializeParams<'a> {
    #[serde(borrow)]
    pub protocol_version: Cow<'a, str>,
    pub capabilities: serde_json::Map<String, Value>,
    pub client_info: crate::model::Implementation,
}
