//! Tools: a definition (name, schema of the arguments, optional schema of the output, hints)
//! and the async code that runs a call.
//!
//! The usual way is [`Tool::new`] over an `async fn(Args, RequestContext)`, where `Args` is a
//! `serde` + `schemars` struct: that one struct is both the advertised `inputSchema` and the
//! parser of a call's arguments, so the two cannot drift apart. Returning [`Json<T>`] adds an
//! `outputSchema` and `structuredContent` from `T` the same way. [`ToolHandler`] is there for
//! tools that take their arguments raw.
//!
//! A call runs in a worker: dropping its future is how it is cancelled, so a tool must be
//! cancel-safe (hold no state that a drop would corrupt). A tool that asks the client for
//! input must not do irreversible work before asking: under the 2026-07-28 revision the call
//! may be run again from the start once the answer comes.

use crate::context::RequestContext;
use crate::model::{CallToolResult, Content, Icon, ProtocolVersion, ToolAnnotations};
use futures_util::future::LocalBoxFuture;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

/// What a tool call's future resolves to.
pub type ToolFuture = LocalBoxFuture<'static, Result<CallToolResult, ToolError>>;

/// How a tool call failed. Every variant but [`Rpc`](Self::Rpc) becomes a result with
/// `isError: true` and the message as text: a tool error is something the model can read and
/// act on. The message goes to the client as written: it must not hold secrets (a
/// connection string, a credential, a stack trace). [`Rpc`](Self::Rpc) is a JSON-RPC error passed on from elsewhere (a gateway's
/// upstream refused the call, or is down).
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The arguments do not fit the tool's argument type; names the field.
    #[error("Invalid arguments: {0}")]
    InvalidArguments(String),
    /// The tool failed.
    #[error("{0}")]
    Failed(String),
    /// A request to the client failed.
    #[error(transparent)]
    Client(#[from] crate::context::ClientRequestError),
    /// Answered as this JSON-RPC error, not as a result.
    #[error(transparent)]
    Rpc(crate::model::RpcError),
}

impl ToolError {
    /// A failure with this message.
    pub fn failed(message: impl Into<String>) -> Self {
        Self::Failed(message.into())
    }

    /// The `isError` result this error is answered with.
    pub fn into_result(self) -> CallToolResult {
        CallToolResult::error(self.to_string())
    }
}

/// The raw `arguments` object of a call, for tools that parse it themselves. A copy of the
/// arguments' text (one allocation per call): the frame they came in with is gone when the
/// session has dispatched it, and the tool may run long after.
#[derive(Debug, Default)]
pub struct Arguments(Option<Box<RawValue>>);

impl Arguments {
    pub(crate) fn new(raw: Option<&RawValue>) -> Self {
        Self(raw.map(ToOwned::to_owned))
    }

    /// Arguments from a JSON value (for tests of a tool).
    pub fn from_value(value: &Value) -> Self {
        Self(serde_json::value::to_raw_value(value).ok())
    }

    /// Length of the raw arguments JSON, in bytes.
    pub fn len(&self) -> usize {
        self.0.as_deref().map_or(0, |raw| raw.get().len())
    }

    /// The raw arguments JSON, if the call had any (to pass on as they came).
    pub fn raw(&self) -> Option<&RawValue> {
        self.0.as_deref()
    }

    /// Whether the call came without arguments.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// Parses into `T`; absent arguments read as `{}`.
    ///
    /// # Errors
    /// [`ToolError::InvalidArguments`] naming the offending field (`text: invalid type: …`).
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, ToolError> {
        crate::protocol::mcp::parse_object(self.0.as_deref()).map_err(ToolError::InvalidArguments)
    }
}

/// Runs calls of a tool whose arguments arrive raw.
///
/// ```
/// use mcp_ws::tool::{Arguments, ToolFuture, ToolHandler};
/// use mcp_ws::{model::CallToolResult, RequestContext};
/// struct Now;
/// impl ToolHandler for Now {
///     fn call(&self, _args: Arguments, _ctx: RequestContext) -> ToolFuture {
///         Box::pin(async { Ok(CallToolResult::text("12:00")) })
///     }
/// }
/// ```
pub trait ToolHandler: Send + Sync + 'static {
    /// Starts a call.
    fn call(&self, arguments: Arguments, ctx: RequestContext) -> ToolFuture;
}

/// What a typed tool function may return.
pub trait ToolOutput: 'static {
    /// The `outputSchema` this output type gives the tool, if any.
    fn output_schema() -> Option<Value> {
        None
    }

    /// The result of the call.
    fn into_call_result(self) -> CallToolResult;
}

impl ToolOutput for CallToolResult {
    fn into_call_result(self) -> CallToolResult {
        self
    }
}

impl ToolOutput for String {
    fn into_call_result(self) -> CallToolResult {
        CallToolResult::text(self)
    }
}

impl ToolOutput for &'static str {
    fn into_call_result(self) -> CallToolResult {
        CallToolResult::text(self)
    }
}

impl ToolOutput for Vec<Content> {
    fn into_call_result(self) -> CallToolResult {
        CallToolResult::new(self)
    }
}

/// Structured tool output: `T`'s schema is the tool's `outputSchema`, and a call's result
/// carries `T` as `structuredContent` (2025-06-18 sessions and newer) and, for every
/// session, as JSON text. MCP wants both to be objects: `T` is a struct (or a map), and a
/// tool returning anything else is refused when it is registered
/// ([`RegistryError::InvalidToolSchema`](crate::RegistryError::InvalidToolSchema)).
///
/// ```
/// use mcp_ws::{tool::Json, Tool, ToolError, RequestContext};
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct City { name: String }
/// #[derive(serde::Serialize, schemars::JsonSchema)]
/// struct Weather { celsius: f64 }
/// async fn weather(_city: City, _ctx: RequestContext) -> Result<Json<Weather>, ToolError> {
///     Ok(Json(Weather { celsius: 21.5 }))
/// }
/// let tool = Tool::new("weather", "Current weather of a city", weather);
/// # let _ = tool;
/// ```
pub struct Json<T>(pub T);

impl<T: Serialize + JsonSchema + 'static> ToolOutput for Json<T> {
    fn output_schema() -> Option<Value> {
        Some(schema_of::<T>())
    }

    fn into_call_result(self) -> CallToolResult {
        match serde_json::to_value(&self.0) {
            Ok(value) => CallToolResult::text(value.to_string()).with_structured(value),
            Err(e) => CallToolResult::error(format!("the tool's output does not serialize: {e}")),
        }
    }
}

/// `T`'s JSON schema, without the draft marker and the Rust type name (noise to a client).
pub(crate) fn schema_of<T: JsonSchema>() -> Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(T)).unwrap_or_default();
    if let Some(object) = schema.as_object_mut() {
        object.remove("$schema");
        object.remove("title");
    }
    schema
}

/// A tool: its definition and the code that runs it.
///
/// ```
/// use mcp_ws::{Tool, ToolError, RequestContext};
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Add { a: f64, b: f64 }
/// async fn add(args: Add, _ctx: RequestContext) -> Result<String, ToolError> {
///     Ok((args.a + args.b).to_string())
/// }
/// let tool = Tool::new("add", "Adds two numbers", add).title("Addition");
/// assert_eq!(tool.name(), "add");
/// ```
#[derive(Clone)]
pub struct Tool {
    pub(crate) definition: Arc<ToolDefinition>,
    /// What a call runs: the tool's own handler, or it behind the check of an
    /// [`output_schema`](Tool::output_schema) set by hand ([`OutputChecked`]).
    pub(crate) handler: Arc<dyn ToolHandler>,
    /// The tool's own handler, which a check set again wraps in place of the last one.
    unchecked: Arc<dyn ToolHandler>,
    /// See [`Tool::version`].
    pub(crate) version: Arc<str>,
}

/// The version of a tool registered without [`Tool::version`].
pub const DEFAULT_TOOL_VERSION: &str = "1";

/// A tool's `inputSchema`, kept as its compact JSON text. Every tool holds one for as long
/// as it is registered, and a gateway holds one per tool of each session's own view: as a
/// `serde_json::Value`, the least object (`{"type":"object"}`, 17 bytes) took a B-tree node
/// of its own, some 670 bytes, half of what a tool of an upstream's list cost.
#[derive(Debug, Clone)]
pub(crate) struct SchemaText(Box<serde_json::value::RawValue>);

impl SchemaText {
    /// The text of `schema` (its keys in order: equal schemas give equal texts).
    fn new(schema: &Value) -> Self {
        // Serializing a `Value` fails only for map keys that are not strings, which a
        // `Value` cannot hold.
        Self(serde_json::value::to_raw_value(schema).unwrap_or_default())
    }

    /// The schema, parsed (for the checks made when the tool is registered).
    pub(crate) fn value(&self) -> Value {
        serde_json::from_str(self.0.get()).unwrap_or_default()
    }
}

impl PartialEq for SchemaText {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

impl Serialize for SchemaText {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

/// What `tools/list` says of a tool.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolDefinition {
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub input_schema: SchemaText,
    pub output_schema: Option<Value>,
    pub annotations: Option<ToolAnnotations>,
    pub icons: Vec<Icon>,
    pub meta: Option<Value>,
    /// Whether a call may run on as a task (not listed: 2026-07-28 has no per-tool field).
    pub task_support: TaskSupport,
}

/// Whether a tool's calls may become tasks (the 2026-07-28 `io.modelcontextprotocol/tasks`
/// extension): answered at once with a task id, run on, polled by the client with
/// `tasks/get`.
///
/// Only a client that declares the extension on its request gets a task; the call becomes
/// one when the tool first waits on something other than the client (before then, what it
/// asks the client is asked the multi round-trip way). Session-era sessions always run
/// the call as an ordinary request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TaskSupport {
    /// Always an ordinary request (the default).
    #[default]
    Forbidden,
    /// A task when the client declares the extension; an ordinary request otherwise, and
    /// also when the tool finishes without waiting.
    Optional,
    /// A task, always: a 2026-07-28 client that does not declare the extension is refused
    /// with -32021 naming it.
    Required,
}

impl Tool {
    /// A tool running `handler`, an async function of its typed arguments and the request's
    /// context. The arguments' type gives the `inputSchema`; the output type may give an
    /// `outputSchema` ([`Json`]).
    pub fn new<A, O, F, Fut>(
        name: impl Into<String>,
        description: impl Into<String>,
        handler: F,
    ) -> Self
    where
        A: DeserializeOwned + JsonSchema + 'static,
        O: ToolOutput,
        F: Fn(A, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, ToolError>> + 'static,
    {
        let mut tool = Self::from_handler(
            name,
            description,
            schema_of::<A>(),
            TypedHandler {
                run: handler,
                _types: PhantomData,
            },
        );
        tool.definition_mut().output_schema = O::output_schema();
        tool
    }

    /// A tool whose arguments arrive raw, described by `input_schema`.
    pub fn from_handler(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
        handler: impl ToolHandler,
    ) -> Self {
        let handler: Arc<dyn ToolHandler> = Arc::new(handler);
        Self {
            definition: Arc::new(ToolDefinition {
                name: name.into(),
                title: None,
                description: Some(description.into()),
                input_schema: SchemaText::new(&input_schema),
                output_schema: None,
                annotations: None,
                icons: Vec::new(),
                meta: None,
                task_support: TaskSupport::Forbidden,
            }),
            unchecked: handler.clone(),
            handler,
            version: Arc::from(DEFAULT_TOOL_VERSION),
        }
    }

    fn definition_mut(&mut self) -> &mut ToolDefinition {
        Arc::make_mut(&mut self.definition)
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.definition.name
    }

    /// Sets the tool's version (default `"1"`). A server may register one name in several
    /// versions; each session sees one of them, under the plain name, in its lists and its
    /// calls: the one the `[[rollout.rules]]` of the settings choose for its identity, else
    /// the lowest version no rule names (see the `rollout` settings). Versions order by
    /// their dot-separated parts, numerically where both are numbers (`2` < `10`).
    ///
    /// ```
    /// use mcp_ws::{Registry, Tool, ToolError, RequestContext};
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Query { q: String }
    /// async fn search_v1(args: Query, _: RequestContext) -> Result<String, ToolError> {
    ///     Ok(format!("v1: {}", args.q))
    /// }
    /// async fn search_v2(args: Query, _: RequestContext) -> Result<String, ToolError> {
    ///     Ok(format!("v2: {}", args.q))
    /// }
    /// let registry = Registry::default();
    /// registry.add_tool(Tool::new("search", "Searches", search_v1)).unwrap();
    /// registry.add_tool(Tool::new("search", "Searches better", search_v2).version("2")).unwrap();
    /// assert_eq!(registry.tool_versions("search"), ["1", "2"]);
    /// // The same name and version twice is refused.
    /// assert!(registry.add_tool(Tool::new("search", "Again", search_v1).version("2")).is_err());
    /// ```
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = Arc::from(version.into());
        self
    }

    /// Sets a human-readable title (2025-06-18 sessions and newer).
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.definition_mut().title = Some(title.into());
        self
    }

    /// Sets hints about what the tool does (2025-03-26 sessions and newer).
    pub fn annotations(mut self, annotations: ToolAnnotations) -> Self {
        self.definition_mut().annotations = Some(annotations);
        self
    }

    /// Adds an icon (2025-11-25 sessions and newer).
    pub fn icon(mut self, icon: Icon) -> Self {
        self.definition_mut().icons.push(icon);
        self
    }

    /// Sets the definition's `_meta` (2025-06-18 sessions and newer).
    pub fn meta(mut self, meta: Value) -> Self {
        self.definition_mut().meta = Some(meta);
        self
    }

    /// Lets calls of this tool become tasks (see [`TaskSupport`]).
    ///
    /// ```
    /// use mcp_ws::{RequestContext, TaskSupport, Tool, ToolError};
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Report { month: String }
    /// let tool = Tool::new("monthly_report", "Builds a report", |r: Report, _ctx: RequestContext| async move {
    ///     tokio::time::sleep(std::time::Duration::from_secs(30)).await;
    ///     Ok::<_, ToolError>(format!("report for {}", r.month))
    /// })
    /// .task_support(TaskSupport::Optional);
    /// ```
    pub fn task_support(mut self, support: TaskSupport) -> Self {
        self.definition_mut().task_support = support;
        self
    }

    /// Replaces the `outputSchema` (for tools built with [`Tool::from_handler`]). The MCP
    /// spec says a result MUST conform to it: a call whose result (other than an `isError`
    /// one) has no `structuredContent`, or one the schema refuses, is answered with an
    /// `isError` result naming the first violation instead. A [`Json`] output's schema
    /// (from [`Tool::new`]) is not checked: its type gives both (but for a float that is not
    /// finite, which serde_json writes as `null`, where the schema says a number).
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.handler = Arc::new(OutputChecked {
            inner: self.unchecked.clone(),
            check: Arc::new(OutputCheck {
                schema: schema.clone(),
                validator: std::sync::OnceLock::new(),
            }),
        });
        self.definition_mut().output_schema = Some(schema);
        self
    }
}

/// A tool's handler whose results are checked against the `outputSchema` set by hand.
struct OutputChecked {
    inner: Arc<dyn ToolHandler>,
    check: Arc<OutputCheck>,
}

/// An `outputSchema` and its validator, made on the first call (a tool never called, and a
/// gateway's tool in a session's view, costs no compilation); `None` when the schema is no
/// valid JSON Schema.
struct OutputCheck {
    schema: Value,
    validator: std::sync::OnceLock<Option<jsonschema::Validator>>,
}

impl ToolHandler for OutputChecked {
    fn call(&self, arguments: Arguments, ctx: RequestContext) -> ToolFuture {
        let call = self.inner.call(arguments, ctx);
        let check = self.check.clone();
        Box::pin(async move {
            let result = call.await?;
            match check.violation(&result) {
                None => Ok(result),
                Some(violation) => Err(ToolError::failed(format!(
                    "Output validation error: {violation}"
                ))),
            }
        })
    }
}

impl OutputCheck {
    /// The message's most of a violation's text: jsonschema quotes the value it refuses,
    /// which may be the whole result.
    const MAX_MESSAGE_BYTES: usize = 512;

    /// Why `result` does not conform, if it does not. An `isError` result is not checked
    /// (as the official SDKs do: a failure carries its message, not the tool's output).
    fn violation(&self, result: &CallToolResult) -> Option<String> {
        if result.is_error {
            return None;
        }
        let Some(structured) = &result.structured_content else {
            return Some("the tool has an outputSchema but gave no structuredContent".into());
        };
        let validator = self.validator.get_or_init(|| {
            jsonschema::validator_for(&self.schema)
                .map_err(|error| tracing::warn!(%error, "a tool's outputSchema is invalid"))
                .ok()
        });
        let Some(validator) = validator else {
            return Some("the tool's outputSchema is not a valid JSON Schema".into());
        };
        let mut message = format!(
            "structuredContent{}",
            crate::schema::first_violation(validator, structured, "")?
        );
        if message.len() > Self::MAX_MESSAGE_BYTES {
            message.truncate(crate::floor_char_boundary(
                &message,
                Self::MAX_MESSAGE_BYTES,
            ));
            message.push('…');
        }
        Some(message)
    }
}

impl crate::model::VersionedSerialize for ToolDefinition {
    fn serialize_for<S: Serializer>(
        &self,
        version: ProtocolVersion,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("name", &self.name)?;
        if version.has_titles_and_meta() {
            if let Some(title) = &self.title {
                map.serialize_entry("title", title)?;
            }
        }
        if let Some(description) = &self.description {
            map.serialize_entry("description", description)?;
        }
        map.serialize_entry("inputSchema", &self.input_schema)?;
        if version.has_titles_and_meta() {
            if let Some(schema) = &self.output_schema {
                map.serialize_entry("outputSchema", schema)?;
            }
        }
        if version.has_tool_annotations() {
            if let Some(annotations) = &self.annotations {
                map.serialize_entry("annotations", annotations)?;
            }
        }
        if version.has_icons() && !self.icons.is_empty() {
            map.serialize_entry("icons", &self.icons)?;
        }
        if version.has_titles_and_meta() {
            if let Some(meta) = &self.meta {
                map.serialize_entry("_meta", meta)?;
            }
        }
        map.end()
    }
}

/// A tool written as an async function of typed arguments.
struct TypedHandler<A, O, F> {
    run: F,
    _types: PhantomData<fn(A) -> O>,
}

impl<A, O, F, Fut> ToolHandler for TypedHandler<A, O, F>
where
    A: DeserializeOwned + JsonSchema + 'static,
    O: ToolOutput,
    F: Fn(A, RequestContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, ToolError>> + 'static,
{
    fn call(&self, arguments: Arguments, ctx: RequestContext) -> ToolFuture {
        match arguments.parse::<A>() {
            Ok(args) => {
                let call = (self.run)(args, ctx);
                Box::pin(async move { call.await.map(ToolOutput::into_call_result) })
            }
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }
}
