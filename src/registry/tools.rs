//! The tool interface, and `typed_tool`: the one way tools are written here, where a
//! `Deserialize + JsonSchema` struct is both the advertised `inputSchema` and the parser of
//! the call's arguments, so the two cannot drift apart.

use crate::mcp::CallToolResult;
use crate::worker::ToolContext;
use futures_util::future::LocalBoxFuture;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::Value;
use std::future::Future;
use std::marker::PhantomData;

pub type ToolFuture = LocalBoxFuture<'static, Result<CallToolResult, ToolError>>;

/// A tool. `call` returns a future that a worker actor drives; dropping that future is how a
/// call is cancelled, so tools must be cancel-safe (hold no state that a drop would corrupt).
pub trait Tool: Send + Sync + 'static {
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    /// JSON Schema of the arguments object.
    fn input_schema(&self) -> Value;
    fn call(&self, arguments: Arguments, ctx: ToolContext) -> ToolFuture;
}

/// How a tool call failed. Both become a result with `isError: true` (MCP tool errors are
/// results the model can read and act on), never a JSON-RPC error.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("Invalid arguments: {0}")]
    InvalidArguments(String),
    #[error("{0}")]
    Failed(String),
}

impl ToolError {
    pub fn into_result(self) -> CallToolResult {
        CallToolResult::error(self.to_string())
    }
}

/// The raw `arguments` object of a call, parsed by the tool into its own type.
#[derive(Debug, Default)]
pub struct Arguments(Option<Box<RawValue>>);

impl Arguments {
    pub fn new(raw: Option<&RawValue>) -> Self {
        Self(raw.map(ToOwned::to_owned))
    }

    /// Length of the raw arguments JSON, in bytes.
    pub fn len(&self) -> usize {
        self.0.as_deref().map_or(0, |raw| raw.get().len())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// Parses into `T`; the error names the offending field (`text: invalid type: …`).
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, ToolError> {
        crate::mcp::parse_object(self.0.as_deref()).map_err(ToolError::InvalidArguments)
    }
}

/// Builds a tool from an async function of typed arguments.
pub fn typed_tool<A, F, Fut>(name: &'static str, description: &'static str, run: F) -> impl Tool
where
    A: DeserializeOwned + JsonSchema + 'static,
    F: Fn(A, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<CallToolResult, ToolError>> + 'static,
{
    let mut schema = serde_json::to_value(schemars::schema_for!(A)).unwrap_or_default();
    if let Some(object) = schema.as_object_mut() {
        // Keep the schema self-contained and short: the draft marker and the Rust type name
        // are noise to a client.
        object.remove("$schema");
        object.remove("title");
    }
    TypedTool {
        name,
        description,
        schema,
        run,
        _args: PhantomData,
    }
}

struct TypedTool<A, F> {
    name: &'static str,
    description: &'static str,
    schema: Value,
    run: F,
    _args: PhantomData<fn() -> A>,
}

impl<A, F, Fut> Tool for TypedTool<A, F>
where
    A: DeserializeOwned + JsonSchema + 'static,
    F: Fn(A, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<CallToolResult, ToolError>> + 'static,
{
    fn name(&self) -> &str {
        self.name
    }

    fn description(&self) -> &str {
        self.description
    }

    fn input_schema(&self) -> Value {
        self.schema.clone()
    }

    fn call(&self, arguments: Arguments, ctx: ToolContext) -> ToolFuture {
        match arguments.parse::<A>() {
            Ok(args) => Box::pin((self.run)(args, ctx)),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }
}
