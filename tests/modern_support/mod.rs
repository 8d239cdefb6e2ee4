//! Helpers of the 2026-07-28 tests (`tests/modern_ws.rs`, `tests/modern_http.rs`): the
//! per-request `_meta` a 2026-07-28 client sends, the server under test (the demo set plus
//! tools, a prompt and a resource that ask the client for input, log, report progress or wait
//! for a gate), checks of the 2026-07-28 result shape, and an HTTP client that sends the
//! headers that revision requires and reads answers as JSON or SSE.
//!
//! Everything here drives the real server through real sockets; nothing is mocked.

#![allow(dead_code)] // each test binary uses a different subset

use crate::common::{settings, start_with, Client, NoArgs, READ_TIMEOUT};
use futures_util::{Stream, StreamExt};
use mcp_ws::model::{
    CallToolResult, CreateMessageRequest, ElicitAction, ElicitRequest, GetPromptResult, LogLevel,
    PromptMessage, ResourceContents, SamplingMessage,
};
use mcp_ws::{
    Prompt, PromptArgument, PromptError, RequestContext, Resource, ResourceError, ResourceTemplate,
    RunningServer, ServerBuilder, Settings, Tool, ToolError,
};
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use reqwest::{RequestBuilder, Response, StatusCode};
use serde_json::{json, Value};
use sse_stream::{Sse, SseStream};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::Semaphore;

pub const MODERN: &str = "2026-07-28";
pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// How the server under test presents itself (not the defaults, so that a result naming
/// them shows the configuration reached it).
pub const SERVER_NAME: &str = "modern-under-test";
pub const SERVER_VERSION: &str = "7.7.7";
pub const INSTRUCTIONS: &str = "Ask for a name with ask_name; read mcp-ws-test://vault.";
/// The caching hints configured for the server under test (none of them the default).
pub const DISCOVER_TTL_MS: u64 = 4321;
pub const LIST_TTL_MS: u64 = 1234;
pub const READ_TTL_MS: u64 = 567;
pub const CACHE_SCOPE: &str = "private";

pub const README: &str = "mcp-ws://demo/readme";
pub const VAULT: &str = "mcp-ws-test://vault";
pub const NOTES_TEMPLATE: &str = "mcp-ws-test://notes/{id}";

// ---------------------------------------------------------------------------------------
// Requests.

/// The `_meta` of a 2026-07-28 request declaring `capabilities`.
pub fn meta(capabilities: Value) -> Value {
    json!({
        PROTOCOL_VERSION: MODERN,
        CLIENT_CAPABILITIES: capabilities,
        CLIENT_INFO: {"name": "modern-tests", "version": "1.0.0"},
    })
}

/// `params` (an object) with the `_meta` of a 2026-07-28 request that declares no
/// capabilities.
pub fn modern(params: Value) -> Value {
    with_meta(params, meta(json!({})))
}

/// `params` (an object) with the `_meta` of a 2026-07-28 request declaring `capabilities`.
pub fn modern_with(capabilities: Value, params: Value) -> Value {
    with_meta(params, meta(capabilities))
}

/// `params` (an object) with `meta` as its `_meta`.
pub fn with_meta(mut params: Value, meta: Value) -> Value {
    params
        .as_object_mut()
        .expect("params are an object")
        .insert("_meta".into(), meta);
    params
}

/// `params` with one more `_meta` member (the params must have a `_meta` already).
pub fn add_meta(mut params: Value, key: &str, value: Value) -> Value {
    params["_meta"]
        .as_object_mut()
        .expect("params carry _meta")
        .insert(key.into(), value);
    params
}

/// The capabilities a client answering every kind of ask declares.
pub fn all_asks() -> Value {
    json!({"elicitation": {}, "sampling": {}, "roots": {}})
}

pub fn request(id: Value, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

pub fn cancelled(id: &Value) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
           "params": {"requestId": id, "reason": "test", "_meta": meta(json!({}))}})
}

/// An answer to an elicitation that accepts with this name.
pub fn accept_name(name: &str) -> Value {
    json!({"action": "accept", "content": {"name": name}})
}

/// The retry of a multi round-trip request: the same params, `inputResponses` and the
/// `requestState` of the round before (when there is one).
pub fn retry(params: &Value, responses: Value, state: Option<&str>) -> Value {
    let mut params = params.clone();
    let object = params.as_object_mut().expect("params are an object");
    object.insert("inputResponses".into(), responses);
    if let Some(state) = state {
        object.insert("requestState".into(), json!(state));
    }
    params
}

// ---------------------------------------------------------------------------------------
// Result shapes.

/// Checks the parts every 2026-07-28 result shares: `resultType` and the server's identity
/// in `_meta`; returns the result.
pub fn assert_modern_result(response: &Value, id: &Value, result_type: &str) -> Value {
    let result = crate::common::assert_result(response, id);
    assert_eq!(result["resultType"], result_type, "{response}");
    let info = &result["_meta"][SERVER_INFO];
    assert_eq!(info["name"], SERVER_NAME, "{response}");
    assert_eq!(info["version"], SERVER_VERSION, "{response}");
    result
}

/// A complete 2026-07-28 result.
/// The `_meta` member the `with_meta` tool puts in its result.
pub const TOOL_META_KEY: &str = "example.com/annotation";

pub fn assert_complete(response: &Value, id: &Value) -> Value {
    assert_modern_result(response, id, "complete")
}

/// A handshake-era result: no `resultType`, no server identity in `_meta`, no caching
/// hints.
pub fn assert_legacy_result(response: &Value, id: &Value) -> Value {
    let result = crate::common::assert_result(response, id);
    assert!(result.get("resultType").is_none(), "{response}");
    assert!(result["_meta"].get(SERVER_INFO).is_none(), "{response}");
    assert!(result.get("ttlMs").is_none(), "{response}");
    assert!(result.get("cacheScope").is_none(), "{response}");
    result
}

/// The caching hints of a cacheable result (lists, reads): `ttl_ms` and the configured
/// scope.
pub fn assert_cache_hints(result: &Value, ttl_ms: u64) {
    assert_eq!(result["ttlMs"], ttl_ms, "{result}");
    assert_eq!(result["cacheScope"], CACHE_SCOPE, "{result}");
}

/// A result that is not cacheable carries no hints.
pub fn assert_no_cache_hints(result: &Value) {
    assert!(result.get("ttlMs").is_none(), "{result}");
    assert!(result.get("cacheScope").is_none(), "{result}");
}

/// An `InputRequiredResult`: checks its shape and that it asks exactly `keys` (sorted), and
/// returns `(inputRequests, requestState)`.
pub fn assert_input_required(response: &Value, id: &Value, keys: &[&str]) -> (Value, String) {
    let result = assert_modern_result(response, id, "input_required");
    assert_no_cache_hints(&result);
    let requests = result["inputRequests"].clone();
    let mut asked: Vec<&str> = requests
        .as_object()
        .unwrap_or_else(|| panic!("inputRequests is an object: {response}"))
        .keys()
        .map(String::as_str)
        .collect();
    asked.sort_unstable();
    assert_eq!(asked, keys, "{response}");
    let state = result["requestState"]
        .as_str()
        .unwrap_or_else(|| panic!("requestState is a string: {response}"))
        .to_owned();
    (requests, state)
}

/// The text of a tool result's first content block.
pub fn text_of(result: &Value) -> &str {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("a text result: {result}"))
}

// ---------------------------------------------------------------------------------------
// The server under test.

/// Settings of the server under test: its identity, instructions, caching hints (none of
/// them the default), and unthrottled progress (every report is sent, so the frames of a
/// request are known in advance).
pub fn modern_settings() -> Settings {
    let mut s = settings();
    s.info.name = SERVER_NAME.into();
    s.info.version = SERVER_VERSION.into();
    s.info.instructions = INSTRUCTIONS.into();
    s.cache.discover_ttl_ms = DISCOVER_TTL_MS;
    s.cache.list_ttl_ms = LIST_TTL_MS;
    s.cache.read_ttl_ms = READ_TTL_MS;
    s.cache.scope = CACHE_SCOPE.into();
    s.progress.min_interval_ms = 0;
    s
}

/// What the tests look at in the server's tools: how often the asking tools ran (each
/// round of a multi round-trip request runs the tool again), and the gate `step_then_hold`
/// waits for.
#[derive(Clone)]
pub struct Fixtures {
    pub runs: Arc<AtomicUsize>,
    pub gate: Arc<Semaphore>,
}

impl Default for Fixtures {
    fn default() -> Self {
        Self {
            runs: Arc::default(),
            gate: Arc::new(Semaphore::new(0)),
        }
    }
}

impl Fixtures {
    pub fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

/// The demo set plus [`add_fixtures`], with `settings`.
pub fn start_modern(settings: Settings) -> (RunningServer, Fixtures) {
    let fixtures = Fixtures::default();
    let server = start_with(settings, |b| add_fixtures(b, &fixtures));
    (server, fixtures)
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct NameForm {
    /// Your name.
    pub name: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct PassphraseForm {
    /// The vault's passphrase.
    pub passphrase: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct GreetingArgs {
    /// How to greet.
    pub greeting: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct StepsArgs {
    pub n: u32,
}

/// Asks for a name (ask key `name`) and greets with it; says so when the user declines or
/// cancels. One tool for both eras: a handshake-era session gets an `elicitation/create`
/// request, a 2026-07-28 request an `InputRequiredResult`.
async fn ask_name(
    args: GreetingArgs,
    ctx: RequestContext,
    runs: Arc<AtomicUsize>,
) -> Result<String, ToolError> {
    runs.fetch_add(1, Ordering::SeqCst);
    let request = ElicitRequest::form_for::<NameForm>("What is your name?");
    let answer = ctx.elicit_as("name", request).await?;
    Ok(match answer.action {
        ElicitAction::Accept => {
            let form: NameForm = answer
                .parse()
                .ok_or_else(|| ToolError::failed("an accepted form without a name"))?;
            format!("{}, {}!", args.greeting, form.name)
        }
        ElicitAction::Decline => format!("{}, whoever you are (declined)", args.greeting),
        ElicitAction::Cancel => format!("{}, whoever you are (cancelled)", args.greeting),
    })
}

/// Three asks, each built from the answer before: a name (`name`, elicitation), a model's
/// line about that name (`draft`, sampling), the client's roots (`roots`).
async fn interview(
    _: NoArgs,
    ctx: RequestContext,
    runs: Arc<AtomicUsize>,
) -> Result<String, ToolError> {
    runs.fetch_add(1, Ordering::SeqCst);
    let name = ctx
        .elicit_as("name", ElicitRequest::form_for::<NameForm>("Who are you?"))
        .await?
        .parse::<NameForm>()
        .map_or_else(|| "nobody".to_owned(), |form| form.name);
    let draft = ctx
        .create_message_as(
            "draft",
            CreateMessageRequest::new(
                vec![SamplingMessage::user(format!(
                    "Write one line about {name}."
                ))],
                50,
            ),
        )
        .await?;
    let line = draft.content.as_text().unwrap_or("").to_owned();
    let roots = ctx.list_roots_as("roots").await?;
    let roots: Vec<&str> = roots.iter().map(|r| r.uri.as_str()).collect();
    Ok(format!(
        "name={name}; draft={line}; roots={}",
        roots.join(",")
    ))
}

/// Asks two things at once (`left`: a name, `right`: the roots): one round asks both.
async fn two_at_once(
    _: NoArgs,
    ctx: RequestContext,
    runs: Arc<AtomicUsize>,
) -> Result<String, ToolError> {
    runs.fetch_add(1, Ordering::SeqCst);
    let (name, roots) = futures_util::future::join(
        ctx.elicit_as("left", ElicitRequest::form_for::<NameForm>("Name?")),
        ctx.list_roots_as("right"),
    )
    .await;
    let name = name?.parse::<NameForm>().map_or(String::new(), |f| f.name);
    Ok(format!("{name} in {} roots", roots?.len()))
}

/// Logs one line at each of debug, info, warning and error (data `"<level> line"`).
async fn chatty(_: NoArgs, ctx: RequestContext) -> Result<&'static str, ToolError> {
    for (level, data) in [
        (LogLevel::Debug, "debug line"),
        (LogLevel::Info, "info line"),
        (LogLevel::Warning, "warning line"),
        (LogLevel::Error, "error line"),
    ] {
        ctx.log(level, data);
    }
    Ok("chatted")
}

/// Reports progress 1..=n of n, with the message `step i`, then answers.
async fn steps(args: StepsArgs, ctx: RequestContext) -> Result<String, ToolError> {
    for step in 1..=args.n {
        let message = format!("step {step}");
        ctx.report_progress(f64::from(step), Some(f64::from(args.n)), Some(&message));
    }
    Ok(format!("stepped {}", args.n))
}

/// Reports progress 1 of 2, then waits until the test opens the gate.
fn step_then_hold(gate: Arc<Semaphore>) -> Tool {
    Tool::new(
        "step_then_hold",
        "Progress 1 of 2, then waits for the test's gate.",
        move |_: NoArgs, ctx: RequestContext| {
            let gate = gate.clone();
            async move {
                ctx.report_progress(1.0, Some(2.0), None);
                let _permit = gate
                    .acquire()
                    .await
                    .map_err(|_| ToolError::failed("gate closed"))?;
                Ok("released")
            }
        },
    )
}

/// A tool that answers `done` at once (to change the registry with).
pub fn plain_tool(name: &str) -> Tool {
    Tool::new(name, "Answers at once.", |_: NoArgs, _ctx| async {
        Ok::<_, ToolError>("done")
    })
}

/// Adds the test's tools, prompt, resource and template to `builder`.
pub fn add_fixtures(builder: ServerBuilder, fixtures: &Fixtures) -> ServerBuilder {
    let runs = fixtures.runs.clone();
    let ask_name_tool = |name: &'static str| {
        let runs = runs.clone();
        Tool::new(name, "Asks for a name and greets.", move |args, ctx| {
            ask_name(args, ctx, runs.clone())
        })
    };
    let interview_runs = runs.clone();
    let two_runs = runs.clone();
    let prompt_runs = runs.clone();
    let vault_runs = runs.clone();
    builder
        .tool(ask_name_tool("ask_name"))
        .tool(ask_name_tool("ask_name_too"))
        .tool(Tool::new(
            "interview",
            "Asks a name, a model, the roots.",
            move |args, ctx| interview(args, ctx, interview_runs.clone()),
        ))
        .tool(Tool::new(
            "two_at_once",
            "Asks two things at once.",
            move |args, ctx| two_at_once(args, ctx, two_runs.clone()),
        ))
        .tool(Tool::new("chatty", "Logs at four levels.", chatty))
        .tool(Tool::new(
            "with_meta",
            "Answers with a result `_meta` of its own.",
            |_: NoArgs, _ctx| async move {
                let mut result = CallToolResult::text("annotated");
                result.meta = Some(json!({TOOL_META_KEY: "kept"}));
                Ok::<_, ToolError>(result)
            },
        ))
        .tool(Tool::new("steps", "Reports n progress steps.", steps))
        .tool(step_then_hold(fixtures.gate.clone()))
        .prompt(
            Prompt::new(
                "personal",
                "Asks whom it is for.",
                move |arguments, ctx: RequestContext| {
                    let runs = prompt_runs.clone();
                    async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        let answer = ctx
                            .elicit_as("name", ElicitRequest::form_for::<NameForm>("For whom?"))
                            .await
                            .map_err(|e| PromptError::Failed(e.to_string()))?;
                        let name = answer
                            .parse::<NameForm>()
                            .map_or_else(|| "someone".to_owned(), |f| f.name);
                        let topic = arguments.get("topic").cloned().unwrap_or_default();
                        Ok(GetPromptResult::new(vec![PromptMessage::user(format!(
                            "Tell {name} about {topic}."
                        ))]))
                    }
                },
            )
            .argument(PromptArgument::required("topic", "What about.")),
        )
        .resource(Resource::new(VAULT, "vault", move |ctx: RequestContext| {
            let runs = vault_runs.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                let answer = ctx
                    .elicit_as(
                        "passphrase",
                        ElicitRequest::form_for::<PassphraseForm>("The passphrase?"),
                    )
                    .await
                    .map_err(|e| ResourceError::Failed(e.to_string()))?;
                let form: PassphraseForm = answer
                    .parse()
                    .ok_or_else(|| ResourceError::Failed("no passphrase".into()))?;
                Ok(ResourceContents::text(
                    VAULT,
                    "text/plain",
                    format!("opened with {}", form.passphrase),
                ))
            }
        }))
        .resource_template(ResourceTemplate::new(
            NOTES_TEMPLATE,
            "notes",
            |uri: String, variables: mcp_ws::resource::TemplateVariables, _ctx| async move {
                let id = variables.get("id").cloned().unwrap_or_default();
                Ok(ResourceContents::text(
                    uri,
                    "text/plain",
                    format!("note {id}"),
                ))
            },
        ))
}

// ---------------------------------------------------------------------------------------
// WebSocket.

/// Sends a request on `client` and returns `(response, frames that came before it)`; the
/// client's backlog must be empty to start with.
pub async fn exchange(client: &mut Client, method: &str, params: Value) -> (Value, Vec<Value>) {
    assert!(
        client.backlog.is_empty(),
        "frames left over: {:?}",
        client.backlog
    );
    let id = client.fresh_id();
    client.send_json(request(id.clone(), method, params)).await;
    let response = client.recv_response(&id).await;
    let before = client.backlog.drain(..).collect();
    (response, before)
}

/// Initializes `client` on 2025-11-25 declaring exactly `capabilities`.
pub async fn initialize_with(client: &mut Client, capabilities: Value) {
    let response = client
        .request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": capabilities,
                   "clientInfo": {"name": "legacy-side", "version": "1.0.0"}}),
        )
        .await;
    let id = response["id"].clone();
    let result = assert_legacy_result(&response, &id);
    assert_eq!(result["protocolVersion"], "2025-11-25", "{response}");
    client
        .send_json(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
}

/// A request whose answer must come with nothing before it (no progress, log line or request
/// to the client); returns `(id, response)`.
pub async fn call(client: &mut Client, method: &str, params: Value) -> (Value, Value) {
    let (response, before) = exchange(client, method, params).await;
    assert!(before.is_empty(), "frames before the answer: {before:?}");
    let id = response["id"].clone();
    (id, response)
}

// ---------------------------------------------------------------------------------------
// HTTP.

const BOTH: &str = "application/json, text/event-stream";

/// The MCP endpoint over HTTP, as a 2026-07-28 client posts to it.
#[derive(Clone)]
pub struct Http {
    pub client: reqwest::Client,
    pub url: String,
}

impl Http {
    pub fn new(server: &RunningServer) -> Self {
        Self {
            client: reqwest::Client::new(),
            url: format!("http://{}/mcp", server.addr()),
        }
    }

    /// A POST of `body` with no MCP headers (only `Accept` and `Content-Type`).
    pub fn bare(&self, body: &Value) -> RequestBuilder {
        self.client
            .post(&self.url)
            .header(ACCEPT, BOTH)
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_string())
    }

    /// A POST of `body` with the headers a 2026-07-28 client sends, taken from the body:
    /// `MCP-Protocol-Version` (its `_meta` version, else 2026-07-28), `Mcp-Method`, and
    /// `Mcp-Name` for the methods that name something.
    pub fn post(&self, body: &Value) -> RequestBuilder {
        let params = &body["params"];
        let version = params["_meta"][PROTOCOL_VERSION].as_str().unwrap_or(MODERN);
        let method = body["method"].as_str().unwrap_or_default();
        let builder = self
            .bare(body)
            .header("MCP-Protocol-Version", version)
            .header("Mcp-Method", method);
        let name = match method {
            "tools/call" | "prompts/get" => params["name"].as_str(),
            "resources/read" => params["uri"].as_str(),
            _ => None,
        };
        match name {
            Some(name) => builder.header("Mcp-Name", name),
            None => builder,
        }
    }

    /// Posts a request answered with a JSON body (no stream); returns `(status, body)`.
    pub async fn json(&self, id: Value, method: &str, params: Value) -> (u16, Value) {
        json_reply(send(self.post(&request(id, method, params))).await).await
    }
}

pub async fn send(builder: RequestBuilder) -> Response {
    tokio::time::timeout(READ_TIMEOUT, builder.send())
        .await
        .expect("the server answers in time")
        .expect("the request is sent and answered")
}

pub fn header<'a>(response: &'a Response, name: &str) -> Option<&'a str> {
    response.headers().get(name).and_then(|v| v.to_str().ok())
}

/// A JSON answer: its status and body. Never a session id: 2026-07-28 has no sessions.
pub async fn json_reply(response: Response) -> (u16, Value) {
    let status = response.status().as_u16();
    assert_eq!(
        header(&response, "content-type"),
        Some("application/json"),
        "status {status}"
    );
    assert!(
        header(&response, "mcp-session-id").is_none(),
        "a 2026-07-28 answer issues no session"
    );
    let text = tokio::time::timeout(READ_TIMEOUT, response.text())
        .await
        .expect("the body arrives in time")
        .expect("the body is read");
    let body = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"));
    (status, body)
}

type EventStream = Pin<Box<dyn Stream<Item = Result<Sse, sse_stream::Error>> + Send>>;

/// A 2026-07-28 SSE answer read message by message. Its events carry no `id` (the revision
/// has no resumption); keep-alive comments are skipped.
pub struct Events {
    stream: EventStream,
}

impl Events {
    /// The events of `response`, which must be a 200 SSE stream without a session id.
    pub fn of(response: Response) -> Self {
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(header(&response, "content-type"), Some("text/event-stream"));
        assert!(
            header(&response, "mcp-session-id").is_none(),
            "a 2026-07-28 answer issues no session"
        );
        Self {
            stream: Box::pin(SseStream::from_bytes_stream(response.bytes_stream())),
        }
    }

    /// The next message, or `None` once the server ended the stream.
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            let next = tokio::time::timeout(READ_TIMEOUT, self.stream.next())
                .await
                .expect("an event or the end of the stream in time")?;
            let sse = next.expect("well-formed SSE");
            let Some(data) = sse.data.filter(|d| !d.is_empty()) else {
                continue; // a comment (keep-alive)
            };
            assert!(sse.id.is_none(), "no event ids in 2026-07-28: {data}");
            assert_eq!(sse.event.as_deref(), Some("message"), "{data}");
            return Some(
                serde_json::from_str(&data).unwrap_or_else(|e| panic!("not JSON ({e}): {data}")),
            );
        }
    }

    pub async fn expect(&mut self) -> Value {
        self.next().await.expect("the stream goes on")
    }

    pub async fn expect_end(&mut self) {
        if let Some(message) = self.next().await {
            panic!("the stream should have ended, got {message}");
        }
    }
}
