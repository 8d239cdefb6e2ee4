//! Routing a request by method: the lifecycle gate, the method table checked against what
//! the session negotiated, the cheap methods answered inline (so `ping` and lists answer at
//! once under load), and the admission of everything that runs user code (a tool call, a
//! resource read, a prompt render, a completion) into a worker actor.

use super::{InFlight, Negotiated, Phase, Request, Session};
use crate::access::RequestRecord;
use crate::context::SessionInfo;
use crate::jsonrpc::{encode_result_with, Params, RequestId};
use crate::mcp::{
    parse_object, server_capabilities, CallToolParams, CompleteParams, CompleteRef, Error,
    GetPromptParams, InitializeParams, ListParams, LogLevel, Method, ProgressToken,
    ProtocolVersion, ReadResourceParams, SetLevelParams, SubscribeParams,
};
use crate::model::{Completion, ForVersion, Implementation};
use crate::registry::{ListKind, ResourceTarget};
use crate::resource::{CompletionRequest, ResourceError};
use crate::tool::Arguments;
use crate::worker::{Job, RequestWorker, Work};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

/// How a request is served.
pub(super) enum Dispatch {
    /// Answered: the serialized result.
    Inline(String),
    /// To run in a worker.
    Worker(WorkerJob),
}

/// A request checked and ready to run in a worker.
pub(super) struct WorkerJob {
    work: Work,
    timeout: Duration,
    progress_token: Option<ProgressToken>,
    /// The request's own trace id, when its `_meta` carried a `traceparent`.
    trace_id: Option<Box<str>>,
    /// What runs, for the worker's span: a tool's name (only when debug logs are on: it is
    /// a copy), or the method.
    label: Cow<'static, str>,
}

const EMPTY_RESULT: &str = "{}";

/// Where the `initialize` result tells a WebSocket client its session id, for a resume.
pub const RESUME_ID_META: &str = "mcp-ws/sessionId";

impl Session {
    pub(super) fn route(
        &mut self,
        request: &Request<'_>,
        batch: Option<u64>,
    ) -> Result<Dispatch, Error> {
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
            (Phase::AwaitingInit, Some(Method::Ping)) => {
                return Ok(Dispatch::Inline(EMPTY_RESULT.into()))
            }
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
            Method::Ping => EMPTY_RESULT.into(),
            Method::ToolsCall => {
                return self
                    .prepare_tool_call(&request.params)
                    .map(Dispatch::Worker)
            }
            Method::ResourcesRead => return self.prepare_read(params).map(Dispatch::Worker),
            Method::PromptsGet => return self.prepare_prompt(params).map(Dispatch::Worker),
            Method::CompletionComplete => return self.prepare_completion(params),
            Method::ToolsList => self.list(ListKind::Tools, version, params)?,
            Method::ResourcesList => self.list(ListKind::Resources, version, params)?,
            Method::ResourceTemplatesList => {
                self.list(ListKind::ResourceTemplates, version, params)?
            }
            Method::PromptsList => self.list(ListKind::Prompts, version, params)?,
            Method::ResourcesSubscribe => {
                let p: SubscribeParams<'_> = parse_params(params)?;
                if self.shared.registry.resource_target(&p.uri).is_none() {
                    return Err(Error::ResourceNotFound {
                        uri: p.uri.into_owned(),
                    });
                }
                let max = self.shared.settings.limits.max_subscriptions_per_session;
                if !self.inbox.subscribe(&p.uri, max) {
                    return Err(Error::TooManySubscriptions { limit: max });
                }
                EMPTY_RESULT.into()
            }
            Method::ResourcesUnsubscribe => {
                let p: SubscribeParams<'_> = parse_params(params)?;
                self.inbox.unsubscribe(&p.uri);
                EMPTY_RESULT.into()
            }
            Method::LoggingSetLevel => {
                let p: SetLevelParams<'_> = parse_params(params)?;
                let level = LogLevel::parse(&p.level).ok_or_else(|| {
                    Error::InvalidParams(format!("level: unknown log level {:?}", p.level))
                })?;
                self.inbox.set_log_level(level);
                EMPTY_RESULT.into()
            }
        };
        Ok(Dispatch::Inline(inline))
    }

    fn initialize(&mut self, params: Option<&RawValue>) -> Result<String, Error> {
        let p: InitializeParams<'_> = parse_params(params)?;
        let version = ProtocolVersion::negotiate(&p.protocol_version);
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
                .resume_id
                .as_ref()
                .map(|id| serde_json::json!({ RESUME_ID_META: id.as_str() })),
        })
        .map_err(|_| Error::Internal)?;
        tracing::info!(
            session = self.id,
            client = %p.client_info.name,
            client_version = %p.client_info.version,
            requested = %p.protocol_version,
            negotiated = %version,
            identity = %self.admission.identity.subject(),
            trace = %self.admission.trace_id,
            "session initialized"
        );
        self.phase = Phase::Ready(Negotiated {
            version,
            offers,
            info: SessionInfo {
                protocol_version: version,
                client_capabilities: Arc::new(Value::Object(p.capabilities)),
                client_info: Arc::new(p.client_info),
                identity: self.admission.identity.clone(),
                trace_id: self.admission.trace_id.clone(),
            },
        });
        // From now on the session hears of list changes and resource updates.
        self.bus = Some(self.shared.registry.bus().attach(&self.inbox));
        Ok(result)
    }

    fn list(
        &self,
        kind: ListKind,
        version: ProtocolVersion,
        params: Option<&RawValue>,
    ) -> Result<String, Error> {
        let p: ListParams<'_> = parse_params(params)?;
        let page_size = self.shared.settings.limits.page_size;
        let chooser = self
            .shared
            .rollout
            .for_subject(self.admission.identity.subject());
        let page =
            self.shared
                .registry
                .page(kind, version, p.cursor.as_deref(), page_size, &chooser)?;
        Ok(page.to_result(kind.member()))
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

    fn version(&self) -> ProtocolVersion {
        match &self.phase {
            Phase::Ready(n) => n.version,
            Phase::AwaitingInit => ProtocolVersion::LATEST,
        }
    }

    fn prepare_tool_call(
        &self,
        params: &Params<'_, CallToolParams<'_>>,
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
        let chooser = self
            .shared
            .rollout
            .for_subject(self.admission.identity.subject());
        let handler = self.shared.registry.tool_handler(&p.name, &chooser)?;
        let progress_token = progress_token(p.meta.as_ref().and_then(|m| m.progress_token))?;
        let trace_id = p.meta.as_ref().and_then(|m| m.trace_id());
        let arguments = Arguments::new(p.arguments);
        let version = self.version();
        // A result is about as long as the arguments for pass-through tools (echo), and
        // short otherwise; the hint only sizes the frame's first allocation.
        let size_hint = arguments.len() + 64;
        let work: Work = Box::new(move |id, ctx| {
            Box::pin(async move {
                let result = handler
                    .call(arguments, ctx)
                    .await
                    .unwrap_or_else(|e| e.into_result());
                encode_result_with(&id, &ForVersion(&result, version), size_hint)
                    .map_err(|_| Error::Internal)
            })
        });
        Ok(WorkerJob {
            work,
            timeout: self.shared.settings.limits.timeout_for_tool(&p.name),
            progress_token,
            trace_id,
            label: if tracing::enabled!(tracing::Level::DEBUG) {
                Cow::Owned(p.name.clone().into_owned())
            } else {
                Cow::Borrowed("tools/call")
            },
        })
    }

    fn prepare_read(&self, params: Option<&RawValue>) -> Result<WorkerJob, Error> {
        self.admit()?;
        let p: ReadResourceParams<'_> = parse_params(params)?;
        let uri = p.uri.into_owned();
        let target = self
            .shared
            .registry
            .resource_target(&uri)
            .ok_or_else(|| Error::ResourceNotFound { uri: uri.clone() })?;
        let progress_token = progress_token(p.meta.as_ref().and_then(|m| m.progress_token))?;
        let trace_id = p.meta.as_ref().and_then(|m| m.trace_id());
        let version = self.version();
        let work: Work = Box::new(move |id, ctx| {
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
                encode_result_with(
                    &id,
                    &ReadResult {
                        contents: ForVersion(&contents, version),
                    },
                    256,
                )
                .map_err(|_| Error::Internal)
            })
        });
        Ok(WorkerJob {
            work,
            timeout: self.shared.settings.limits.request_timeout(),
            progress_token,
            trace_id,
            label: Cow::Borrowed("resources/read"),
        })
    }

    fn prepare_prompt(&self, params: Option<&RawValue>) -> Result<WorkerJob, Error> {
        self.admit()?;
        let p: GetPromptParams<'_> = parse_params(params)?;
        let prompt = self
            .shared
            .registry
            .prompt(&p.name)
            .ok_or_else(|| Error::UnknownPrompt {
                name: p.name.clone().into_owned(),
            })?;
        if let Some(missing) = prompt.missing_argument(&p.arguments) {
            return Err(Error::MissingPromptArgument {
                prompt: p.name.into_owned(),
                argument: missing.to_owned(),
            });
        }
        let progress_token = progress_token(p.meta.as_ref().and_then(|m| m.progress_token))?;
        let trace_id = p.meta.as_ref().and_then(|m| m.trace_id());
        let arguments = p.arguments;
        let version = self.version();
        let work: Work = Box::new(move |id, ctx| {
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
                        })?;
                encode_result_with(&id, &ForVersion(&rendered, version), 256)
                    .map_err(|_| Error::Internal)
            })
        });
        Ok(WorkerJob {
            work,
            timeout: self.shared.settings.limits.request_timeout(),
            progress_token,
            trace_id,
            label: Cow::Borrowed("prompts/get"),
        })
    }

    fn prepare_completion(&self, params: Option<&RawValue>) -> Result<Dispatch, Error> {
        let p: CompleteParams = parse_params(params)?;
        let registry = &self.shared.registry;
        let unknown_argument = || {
            Error::InvalidParams(format!(
                "argument.name: no argument {:?} to complete",
                p.argument.name
            ))
        };
        let completer = match &p.reference {
            CompleteRef::Prompt { name } => {
                let prompt = registry
                    .prompt(name)
                    .ok_or_else(|| Error::UnknownPrompt { name: name.clone() })?;
                if !prompt.has_argument(&p.argument.name) {
                    return Err(unknown_argument());
                }
                prompt.completer
            }
            CompleteRef::Resource { uri } => {
                let template = registry.resource_template(uri).ok_or_else(|| {
                    Error::InvalidParams(format!("ref.uri: unknown resource template {uri:?}"))
                })?;
                if !template.has_variable(&p.argument.name) {
                    return Err(unknown_argument());
                }
                template.completer
            }
        };
        let Some(completer) = completer else {
            return Ok(Dispatch::Inline(completion_result(Completion::default())));
        };
        self.admit()?;
        let request = CompletionRequest {
            argument: p.argument.name,
            value: p.argument.value,
            context: p.context.map(|c| c.arguments).unwrap_or_default(),
        };
        let work: Work = Box::new(move |id, ctx| {
            Box::pin(async move {
                let values = completer.complete(request, ctx).await;
                let result = completion_result(Completion::new(values));
                Ok(crate::jsonrpc::encode_result(&id, &result))
            })
        });
        Ok(Dispatch::Worker(WorkerJob {
            work,
            timeout: self.shared.settings.limits.request_timeout(),
            progress_token: None,
            trace_id: None,
            label: Cow::Borrowed("completion/complete"),
        }))
    }

    /// Starts the worker of a job; the global pool is awaited inside the worker. The
    /// request's record moves into its in-flight entry.
    pub(super) fn start_worker(
        &mut self,
        id: RequestId,
        job: WorkerJob,
        exchange: u64,
        batch: Option<u64>,
        record: &mut Option<RequestRecord>,
    ) -> Result<(), Error> {
        let Phase::Ready(negotiated) = &self.phase else {
            // `route` admits no worker job before `initialize`.
            return Err(Error::Internal);
        };
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
        } = job;
        // A child of the request span (session, id, method), which is entered here.
        let span = tracing::debug_span!(
            "worker",
            run = %label,
            trace = trace_id.as_deref().unwrap_or(&negotiated.info.trace_id),
        );
        let worker = RequestWorker::run(Job {
            id: id.clone(),
            received: record.started(),
            work,
            timeout,
            wants_progress: progress_token.is_some(),
            trace_id,
            inbox: self.inbox.clone(),
            session: negotiated.info.clone(),
            shared: self.shared.clone(),
            span,
        });
        // The worker may already be done here, but its `Finished` waits in the inbox, which
        // is drained after this call returns: the entry is always in place first.
        self.in_flight.insert(
            id,
            InFlight {
                worker,
                progress_token,
                exchange,
                batch,
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

impl Negotiated {
    /// Whether the session may call `method`: its capability was declared to this session.
    fn serves(&self, method: Method) -> bool {
        use crate::mcp::Capability;
        match method.capability() {
            None | Some(Capability::Logging) => true,
            Some(Capability::Tools) => self.offers.tools,
            Some(Capability::Resources) => self.offers.resources,
            Some(Capability::Prompts) => self.offers.prompts,
            Some(Capability::Completions) => self.offers.completions && self.version.has_audio(),
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
    }
}

/// A progress token from `_meta`, checked (a string or a number).
fn progress_token(raw: Option<&RawValue>) -> Result<Option<ProgressToken>, Error> {
    match raw {
        None => Ok(None),
        Some(raw) => ProgressToken::from_raw(raw).map(Some).ok_or_else(|| {
            Error::InvalidParams("_meta.progressToken: must be a string or a number".into())
        }),
    }
}

/// MCP params are named: an object (or absent, read as `{}`).
fn parse_params<'a, T: Deserialize<'a>>(params: Option<&'a RawValue>) -> Result<T, Error> {
    parse_object(params).map_err(Error::InvalidParams)
}
