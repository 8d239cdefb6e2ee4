//! Routing a request by method: the lifecycle gate, the method table check against the
//! negotiated version, the cheap methods answered inline (so `ping` and lists answer at once
//! under tool load), and the admission of `tools/call` into a worker actor.

use super::{InFlight, Negotiated, Phase, Request, Session};
use crate::jsonrpc::{encode_result_with, Params, RequestId};
use crate::mcp::Error;
use crate::mcp::{
    parse_object, server_capabilities, CallToolParams, CompleteParams, CompleteRef,
    GetPromptParams, InitializeParams, ListParams, LogLevel, Method, ProgressToken,
    ProtocolVersion, ReadResourceParams, SetLevelParams,
};
use crate::registry::{Arguments, Tool};
use crate::worker::{Job, RequestWorker, SessionInfo, Work};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::sync::Arc;

pub(super) enum Route {
    /// Answered: the serialized result.
    Inline(String),
    /// To run in a worker.
    Worker(ToolCall),
}

/// A `tools/call` checked and ready to start.
pub(super) struct ToolCall {
    tool: Arc<dyn Tool>,
    arguments: Arguments,
    progress_token: Option<ProgressToken>,
}

const EMPTY_RESULT: &str = "{}";

impl Session {
    pub(super) fn route(
        &mut self,
        request: &Request<'_>,
        batch: Option<u64>,
    ) -> Result<Route, Error> {
        let method = Method::parse(&request.method);
        // Only `tools/call` params come parsed (`CallToolParams` is the eager type).
        let params = match request.params {
            Params::Raw(raw) => raw,
            Params::Parsed(_) => None,
        };
        let version = match (&self.phase, method) {
            // 2025-03-26, lifecycle: "The initialize request MUST NOT be part of a JSON-RPC batch".
            (_, Some(Method::Initialize)) if batch.is_some() => {
                return Err(Error::invalid_request(
                    "initialize must not be sent in a batch",
                ))
            }
            (Phase::AwaitingInit, Some(Method::Initialize)) => {
                return self.initialize(params).map(Route::Inline)
            }
            (Phase::AwaitingInit, Some(Method::Ping)) => {
                return Ok(Route::Inline(EMPTY_RESULT.into()))
            }
            (Phase::AwaitingInit, _) => return Err(Error::NotInitialized),
            (Phase::Ready(negotiated), _) => negotiated.version,
        };
        let method = match method {
            Some(method) if method.available_in(version) => method,
            _ => {
                return Err(Error::MethodNotFound {
                    method: request.method.clone().into_owned(),
                })
            }
        };
        let registry = &self.shared.registry;
        let result = match method {
            Method::Initialize => {
                return Err(Error::invalid_request("the session is already initialized"))
            }
            Method::Ping => EMPTY_RESULT.into(),
            Method::ToolsCall => return self.prepare_tool_call(&request.params).map(Route::Worker),
            Method::ToolsList => {
                no_cursor(params)?;
                registry.list_tools().to_string()
            }
            Method::ResourcesList => {
                no_cursor(params)?;
                registry.list_resources().to_string()
            }
            Method::ResourceTemplatesList => {
                no_cursor(params)?;
                json!({ "resourceTemplates": [] }).to_string()
            }
            Method::PromptsList => {
                no_cursor(params)?;
                registry.list_prompts().to_string()
            }
            Method::ResourcesRead => {
                let p: ReadResourceParams<'_> = parse_params(params)?;
                registry.read_resource(&p.uri)?.to_string()
            }
            Method::PromptsGet => {
                let p: GetPromptParams<'_> = parse_params(params)?;
                registry.get_prompt(&p.name, &p.arguments)?.to_string()
            }
            Method::LoggingSetLevel => {
                let p: SetLevelParams<'_> = parse_params(params)?;
                self.log_level = LogLevel::parse(&p.level).ok_or_else(|| {
                    Error::InvalidParams(format!("level: unknown log level {:?}", p.level))
                })?;
                EMPTY_RESULT.into()
            }
            Method::CompletionComplete => {
                let p: CompleteParams = parse_params(params)?;
                match p.reference {
                    CompleteRef::Prompt { name } => registry
                        .complete_prompt_argument(&name, &p.argument.name, &p.argument.value)?
                        .to_string(),
                    // No resource templates, so nothing to complete.
                    CompleteRef::Resource { .. } => {
                        json!({ "completion": { "values": [], "total": 0, "hasMore": false } })
                            .to_string()
                    }
                }
            }
        };
        Ok(Route::Inline(result))
    }

    fn initialize(&mut self, params: Option<&RawValue>) -> Result<String, Error> {
        let p: InitializeParams<'_> = parse_params(params)?;
        let version = ProtocolVersion::negotiate(&p.protocol_version);
        let result = json!({
            "protocolVersion": version.as_str(),
            "capabilities": server_capabilities(version),
            "serverInfo": { "name": "mcp-ws", "version": env!("CARGO_PKG_VERSION") },
        });
        tracing::info!(
            session = self.id,
            client = %p.client_info.name,
            client_version = %p.client_info.version,
            requested = %p.protocol_version,
            negotiated = %version,
            "session initialized"
        );
        self.phase = Phase::Ready(Negotiated {
            version,
            client_capabilities: Arc::new(Value::Object(p.capabilities)),
            client_info: p.client_info,
        });
        Ok(result.to_string())
    }

    fn prepare_tool_call(
        &self,
        params: &Params<'_, CallToolParams<'_>>,
    ) -> Result<ToolCall, Error> {
        // The per-session cap first, synchronously: an over-cap request is refused at once,
        // before the tool is looked up or its arguments copied.
        let limits = &self.shared.settings.limits;
        if self.in_flight.len() >= limits.max_in_flight_per_session {
            self.shared.metrics.rejected_session_busy.inc();
            return Err(Error::SessionBusy {
                limit: limits.max_in_flight_per_session,
            });
        }
        let parsed;
        let p = match params {
            Params::Parsed(p) => p,
            Params::Raw(raw) => {
                parsed = parse_params::<CallToolParams<'_>>(*raw)?;
                &parsed
            }
        };
        let tool = self.shared.registry.tool(&p.name)?;
        let progress_token = match p.meta.as_ref().and_then(|m| m.progress_token) {
            None => None,
            Some(raw) => Some(ProgressToken::from_raw(raw).ok_or_else(|| {
                Error::InvalidParams("_meta.progressToken: must be a string or a number".into())
            })?),
        };
        Ok(ToolCall {
            tool,
            arguments: Arguments::new(p.arguments),
            progress_token,
        })
    }

    /// Starts the worker of a call `prepare_tool_call` admitted; the global pool is awaited
    /// inside the worker.
    pub(super) fn start_worker(
        &mut self,
        id: RequestId,
        call: ToolCall,
        batch: Option<u64>,
    ) -> Result<(), Error> {
        let limits = &self.shared.settings.limits;
        let (Phase::Ready(negotiated), Some(inbox)) = (&self.phase, &self.inbox) else {
            // `route` admits no tools/call before `initialize`; an actor attaches its inbox
            // before its first frame.
            return Err(Error::Internal);
        };
        let ToolCall {
            tool,
            arguments,
            progress_token,
        } = call;
        let timeout = limits.timeout_for_tool(tool.name());
        // A child of the request span (session, id, method), which is entered here.
        let span = tracing::debug_span!("worker", tool = tool.name());
        let frame_id = id.clone();
        // A result is about as long as the arguments for pass-through tools (echo), and
        // short otherwise; the hint only sizes the frame's first allocation.
        let size_hint = arguments.len() + 64;
        let work: Work = Box::new(move |ctx| {
            Box::pin(async move {
                let result = tool
                    .call(arguments, ctx)
                    .await
                    .unwrap_or_else(|e| e.into_result());
                encode_result_with(&frame_id, &result, size_hint).map_err(|_| Error::Internal)
            })
        });
        let worker = RequestWorker::run(Job {
            id: id.clone(),
            work,
            timeout,
            wants_progress: progress_token.is_some(),
            session: inbox.clone(),
            session_info: SessionInfo {
                protocol_version: negotiated.version,
                client_capabilities: negotiated.client_capabilities.clone(),
            },
            shared: self.shared.clone(),
            span,
        });
        // The worker may already be done here, but its `Finished` is a message in this
        // actor's mailbox, handled after this call returns: the entry is always in place first.
        self.in_flight.insert(
            id,
            InFlight {
                worker,
                progress_token,
                batch,
            },
        );
        self.shared.metrics.workers.inc();
        self.shared
            .metrics
            .session_in_flight
            .observe(self.in_flight.len() as u64);
        Ok(())
    }

    /// The client's name and version, once initialized.
    pub fn client_info(&self) -> Option<(&str, &str)> {
        match &self.phase {
            Phase::Ready(n) => Some((n.client_info.name.as_str(), n.client_info.version.as_str())),
            Phase::AwaitingInit => None,
        }
    }
}

/// MCP params are named: an object (or absent, read as `{}`).
fn parse_params<'a, T: Deserialize<'a>>(params: Option<&'a RawValue>) -> Result<T, Error> {
    parse_object(params).map_err(Error::InvalidParams)
}

/// This server returns every list in one page, so any cursor is one it never issued.
fn no_cursor(params: Option<&RawValue>) -> Result<(), Error> {
    let p: ListParams<'_> = parse_params(params)?;
    match p.cursor {
        Some(_) => Err(Error::InvalidParams("cursor: unknown cursor".into())),
        None => Ok(()),
    }
}
