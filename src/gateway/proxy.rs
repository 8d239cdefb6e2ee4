//! What an upstream offers, as this server's own tools, resources, templates and prompts:
//! definitions taken from the upstream's lists (names prefixed), and handlers that forward
//! each request and pass its answer back unchanged.

use super::upstream::Upstream;
use crate::context::RequestContext;
use crate::model::{
    CallToolResult, Content, GetPromptResult, PromptMessage, ResourceContents, Role, RpcError,
};
use crate::prompt::{PromptArgument, PromptArguments, PromptError, PromptFuture, PromptRenderer};
use crate::resource::{
    Completer, CompletionRequest, ResourceError, ResourceFuture, ResourceReader, TemplateReader,
    TemplateVariables,
};
use crate::tool::{Arguments, ToolError, ToolFuture, ToolHandler};
use crate::{Prompt, Resource, ResourceTemplate, Tool};
use futures_util::future::LocalBoxFuture;
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// A tool of the upstream: `name` is the upstream's own.
struct ProxyTool {
    upstream: Arc<Upstream>,
    name: String,
}

impl ToolHandler for ProxyTool {
    fn call(&self, arguments: Arguments, ctx: RequestContext) -> ToolFuture {
        let upstream = self.upstream.clone();
        let mut params = json!({ "name": self.name });
        if let Some(raw) = arguments.raw() {
            // An object, as MCP has `arguments` (and as a library tool refuses anything
            // else): what the child would make of `"x"` or `[1, 2]` is its own guess.
            match serde_json::from_str::<Value>(raw.get()) {
                Ok(arguments @ Value::Object(_)) => params["arguments"] = arguments,
                Ok(_) => {
                    return Box::pin(std::future::ready(Err(ToolError::InvalidArguments(
                        "must be a JSON object".into(),
                    ))))
                }
                Err(e) => {
                    return Box::pin(std::future::ready(Err(ToolError::InvalidArguments(
                        e.to_string(),
                    ))))
                }
            }
        }
        Box::pin(async move {
            let raw = upstream
                .forward(&ctx, "tools/call", params)
                .await
                .map_err(ToolError::Rpc)?;
            call_result(&raw).map_err(|e| ToolError::Rpc(upstream.invalid_answer(e)))
        })
    }
}

/// An upstream's `tools/call` result, passed on: content blocks as they are, structured
/// content, `isError` and `_meta`.
fn call_result(raw: &serde_json::value::RawValue) -> Result<CallToolResult, String> {
    let Value::Object(mut result) = serde_json::from_str(raw.get()).map_err(|e| e.to_string())?
    else {
        return Err("the result is not an object".into());
    };
    let content = match result.remove("content") {
        Some(Value::Array(blocks)) => blocks.into_iter().map(block).collect::<Result<_, _>>()?,
        None => Vec::new(),
        Some(_) => return Err("content is not an array".into()),
    };
    Ok(CallToolResult {
        content,
        structured_content: result.remove("structuredContent"),
        is_error: result
            .get("isError")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        meta: result.remove("_meta"),
    })
}

fn block(value: Value) -> Result<Content, String> {
    match value {
        Value::Object(block) => Ok(Content::raw(block)),
        _ => Err("a content block is not an object".into()),
    }
}

impl Upstream {
    fn invalid_answer(&self, why: String) -> RpcError {
        RpcError::new(
            -32603,
            format!("Upstream {} answered wrongly: {why}", self.name),
        )
        .with_data(json!({ "upstream": &*self.name }))
    }
}

/// The tool an upstream's `tools/list` entry describes, under `prefix`.
pub(crate) fn tool(upstream: &Arc<Upstream>, definition: &Value) -> Option<(String, Tool)> {
    let name = definition.get("name")?.as_str()?.to_owned();
    let schema = definition
        .get("inputSchema")
        .cloned()
        .unwrap_or_else(|| json!({ "type": "object" }));
    let description = definition
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut tool = Tool::from_handler(
        format!("{}{name}", upstream.prefix),
        description,
        schema,
        ProxyTool {
            upstream: upstream.clone(),
            name: name.clone(),
        },
    );
    if let Some(title) = definition.get("title").and_then(Value::as_str) {
        tool = tool.title(title);
    }
    if let Some(schema) = definition.get("outputSchema") {
        tool = tool.output_schema(schema.clone());
    }
    if let Some(annotations) = definition
        .get("annotations")
        .and_then(|a| serde_json::from_value(a.clone()).ok())
    {
        tool = tool.annotations(annotations);
    }
    for icon in icons(definition) {
        tool = tool.icon(icon);
    }
    if let Some(meta) = definition.get("_meta") {
        tool = tool.meta(meta.clone());
    }
    Some((name, tool))
}

fn icons(definition: &Value) -> Vec<crate::model::Icon> {
    definition
        .get("icons")
        .and_then(|i| serde_json::from_value(i.clone()).ok())
        .unwrap_or_default()
}

/// Reads a resource (fixed or from a template) of the upstream.
struct ProxyReader {
    upstream: Arc<Upstream>,
}

impl ProxyReader {
    fn read(&self, uri: &str, ctx: RequestContext) -> ResourceFuture {
        let upstream = self.upstream.clone();
        let params = json!({ "uri": uri });
        Box::pin(async move {
            let raw = upstream
                .forward(&ctx, "resources/read", params)
                .await
                .map_err(ResourceError::Rpc)?;
            let mut result: Map<String, Value> = serde_json::from_str(raw.get())
                .map_err(|e| ResourceError::Rpc(upstream.invalid_answer(e.to_string())))?;
            let Some(Value::Array(contents)) = result.remove("contents") else {
                return Err(ResourceError::Rpc(
                    upstream.invalid_answer("no contents".into()),
                ));
            };
            contents
                .into_iter()
                .map(|c| match c {
                    Value::Object(c) => ResourceContents::raw(c),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| {
                    ResourceError::Rpc(upstream.invalid_answer("contents without a uri".into()))
                })
        })
    }
}

impl ResourceReader for ProxyReader {
    fn read(&self, uri: &str, ctx: RequestContext) -> ResourceFuture {
        ProxyReader::read(self, uri, ctx)
    }
}

impl TemplateReader for ProxyReader {
    fn read(
        &self,
        uri: &str,
        _variables: TemplateVariables,
        ctx: RequestContext,
    ) -> ResourceFuture {
        ProxyReader::read(self, uri, ctx)
    }
}

/// A resource of the upstream's `resources/list`, at its own URI.
pub(crate) fn resource(upstream: &Arc<Upstream>, definition: &Value) -> Option<Resource> {
    let uri = definition.get("uri")?.as_str()?;
    let name = definition
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or(uri);
    let mut resource = Resource::from_reader(
        uri,
        name,
        ProxyReader {
            upstream: upstream.clone(),
        },
    );
    let text = |key: &str| definition.get(key).and_then(Value::as_str);
    if let Some(title) = text("title") {
        resource = resource.title(title);
    }
    if let Some(description) = text("description") {
        resource = resource.description(description);
    }
    if let Some(mime) = text("mimeType") {
        resource = resource.mime_type(mime);
    }
    if let Some(size) = definition.get("size").and_then(Value::as_u64) {
        resource = resource.size(size);
    }
    if let Some(annotations) = definition
        .get("annotations")
        .and_then(|a| serde_json::from_value(a.clone()).ok())
    {
        resource = resource.annotations(annotations);
    }
    for icon in icons(definition) {
        resource = resource.icon(icon);
    }
    if let Some(meta) = definition.get("_meta") {
        resource = resource.meta(meta.clone());
    }
    Some(resource)
}

/// A template of the upstream's `resources/templates/list`, completions forwarded.
pub(crate) fn template(upstream: &Arc<Upstream>, definition: &Value) -> Option<ResourceTemplate> {
    let uri_template = definition.get("uriTemplate")?.as_str()?;
    let name = definition
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or(uri_template);
    let mut template = ResourceTemplate::from_reader(
        uri_template,
        name,
        ProxyReader {
            upstream: upstream.clone(),
        },
    );
    let text = |key: &str| definition.get(key).and_then(Value::as_str);
    if let Some(title) = text("title") {
        template = template.title(title);
    }
    if let Some(description) = text("description") {
        template = template.description(description);
    }
    if let Some(mime) = text("mimeType") {
        template = template.mime_type(mime);
    }
    if let Some(annotations) = definition
        .get("annotations")
        .and_then(|a| serde_json::from_value(a.clone()).ok())
    {
        template = template.annotations(annotations);
    }
    for icon in icons(definition) {
        template = template.icon(icon);
    }
    if let Some(meta) = definition.get("_meta") {
        template = template.meta(meta.clone());
    }
    if upstream_completes(upstream) {
        template = template.completer(ProxyCompleter {
            upstream: upstream.clone(),
            reference: json!({ "type": "ref/resource", "uri": uri_template }),
        });
    }
    Some(template)
}

fn upstream_completes(upstream: &Upstream) -> bool {
    upstream
        .completions
        .load(std::sync::atomic::Ordering::Relaxed)
}

/// Renders a prompt of the upstream.
struct ProxyPrompt {
    upstream: Arc<Upstream>,
    name: String,
}

impl PromptRenderer for ProxyPrompt {
    fn render(&self, arguments: PromptArguments, ctx: RequestContext) -> PromptFuture {
        let upstream = self.upstream.clone();
        let params = json!({ "name": self.name, "arguments": arguments });
        Box::pin(async move {
            let raw = upstream
                .forward(&ctx, "prompts/get", params)
                .await
                .map_err(PromptError::Rpc)?;
            prompt_result(&raw).map_err(|e| PromptError::Rpc(upstream.invalid_answer(e)))
        })
    }
}

fn prompt_result(raw: &serde_json::value::RawValue) -> Result<GetPromptResult, String> {
    let Value::Object(mut result) = serde_json::from_str(raw.get()).map_err(|e| e.to_string())?
    else {
        return Err("the result is not an object".into());
    };
    let Some(Value::Array(messages)) = result.remove("messages") else {
        return Err("no messages".into());
    };
    let messages = messages
        .into_iter()
        .map(|mut message| {
            let role: Role =
                serde_json::from_value(message.get("role").cloned().unwrap_or_default())
                    .map_err(|e| format!("role: {e}"))?;
            let content = block(
                message
                    .get_mut("content")
                    .map(Value::take)
                    .unwrap_or_default(),
            )?;
            Ok(PromptMessage { role, content })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let mut rendered = GetPromptResult::new(messages);
    rendered.description = result
        .remove("description")
        .and_then(|d| d.as_str().map(str::to_owned));
    Ok(rendered)
}

/// The prompt an upstream's `prompts/list` entry describes, under `prefix`.
pub(crate) fn prompt(upstream: &Arc<Upstream>, definition: &Value) -> Option<Prompt> {
    let name = definition.get("name")?.as_str()?;
    let description = definition
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut prompt = Prompt::from_renderer(
        format!("{}{name}", upstream.prefix),
        description,
        ProxyPrompt {
            upstream: upstream.clone(),
            name: name.to_owned(),
        },
    );
    for argument in definition
        .get("arguments")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(arg_name) = argument.get("name").and_then(Value::as_str) else {
            continue;
        };
        prompt = prompt.argument(PromptArgument {
            name: arg_name.to_owned(),
            title: argument
                .get("title")
                .and_then(Value::as_str)
                .map(str::to_owned),
            description: argument
                .get("description")
                .and_then(Value::as_str)
                .map(str::to_owned),
            required: argument
                .get("required")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        });
    }
    if let Some(title) = definition.get("title").and_then(Value::as_str) {
        prompt = prompt.title(title);
    }
    for icon in icons(definition) {
        prompt = prompt.icon(icon);
    }
    if let Some(meta) = definition.get("_meta") {
        prompt = prompt.meta(meta.clone());
    }
    if upstream_completes(upstream) {
        prompt = prompt.completer(ProxyCompleter {
            upstream: upstream.clone(),
            reference: json!({ "type": "ref/prompt", "name": name }),
        });
    }
    Some(prompt)
}

/// Forwards `completion/complete` for one prompt or template.
struct ProxyCompleter {
    upstream: Arc<Upstream>,
    /// The `ref` as the upstream knows it (its own prompt name).
    reference: Value,
}

impl Completer for ProxyCompleter {
    fn complete(
        &self,
        request: CompletionRequest,
        ctx: RequestContext,
    ) -> LocalBoxFuture<'static, Vec<String>> {
        let upstream = self.upstream.clone();
        let mut params = json!({
            "ref": self.reference,
            "argument": { "name": request.argument, "value": request.value },
        });
        if !request.context.is_empty() {
            params["context"] = json!({ "arguments": request.context });
        }
        Box::pin(async move {
            let Ok(raw) = upstream.forward(&ctx, "completion/complete", params).await else {
                return Vec::new();
            };
            serde_json::from_str::<Value>(raw.get())
                .ok()
                .and_then(|r| {
                    serde_json::from_value(r.get("completion")?.get("values")?.clone()).ok()
                })
                .unwrap_or_default()
        })
    }
}
