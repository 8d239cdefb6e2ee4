//! Prompts: named message templates with declared arguments, rendered by async code in a
//! worker (like a tool call), optionally offering completions of their arguments.
//! Required arguments are checked for every prompt before its code runs.

use crate::context::RequestContext;
use crate::model::{GetPromptResult, Icon, ProtocolVersion};
use crate::resource::Completer;
use futures_util::future::LocalBoxFuture;
use serde::ser::{SerializeMap, Serializer};
use serde_json::Value;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

/// The arguments of a `prompts/get`, by name.
pub type PromptArguments = HashMap<String, String>;

/// What a render's future resolves to.
pub type PromptFuture = LocalBoxFuture<'static, Result<GetPromptResult, PromptError>>;

/// Why a prompt could not be rendered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PromptError {
    /// An argument has a value the prompt cannot use (answered -32602).
    #[error("Invalid argument: {0}")]
    InvalidArgument(String),
    /// Rendering failed; the message is sent to the client, so it must not hold secrets.
    #[error("Prompt failed: {0}")]
    Failed(String),
    /// Answered as this JSON-RPC error (a gateway's upstream answered with it).
    #[error(transparent)]
    Rpc(crate::model::RpcError),
}

/// Renders a prompt.
pub trait PromptRenderer: Send + Sync + 'static {
    /// Renders with these arguments (the required ones are known to be present).
    fn render(&self, arguments: PromptArguments, ctx: RequestContext) -> PromptFuture;
}

/// A declared argument of a prompt.
///
/// ```
/// let name = mcp_ws::PromptArgument::required("name", "Who to greet");
/// assert!(name.required);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct PromptArgument {
    /// Its name.
    pub name: String,
    /// A human-readable title (2025-06-18 sessions and newer).
    pub title: Option<String>,
    /// What it is.
    pub description: Option<String>,
    /// Whether `prompts/get` must give it.
    pub required: bool,
}

impl PromptArgument {
    /// A required argument.
    pub fn required(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            title: None,
            description: Some(description.into()),
            required: true,
        }
    }

    /// An optional argument.
    pub fn optional(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            required: false,
            ..Self::required(name, description)
        }
    }
}

/// A prompt.
///
/// ```
/// use mcp_ws::{Prompt, PromptArgument, model::{GetPromptResult, PromptMessage}};
/// let greet = Prompt::new("greet", "Greets someone", |args, _ctx| async move {
///     Ok(GetPromptResult::new(vec![PromptMessage::user(format!("Please greet {}.", args["name"]))]))
/// })
/// .argument(PromptArgument::required("name", "Who to greet"));
/// assert_eq!(greet.name(), "greet");
/// ```
#[derive(Clone)]
pub struct Prompt {
    pub(crate) definition: Arc<PromptDefinition>,
    pub(crate) renderer: Arc<dyn PromptRenderer>,
    pub(crate) completer: Option<Arc<dyn Completer>>,
}

/// What `prompts/list` says of a prompt.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PromptDefinition {
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub arguments: Vec<PromptArgument>,
    pub icons: Vec<Icon>,
    pub meta: Option<Value>,
}

impl Prompt {
    /// A prompt rendered by `render`, an async function of its arguments and the request's
    /// context.
    pub fn new<F, Fut>(name: impl Into<String>, description: impl Into<String>, render: F) -> Self
    where
        F: Fn(PromptArguments, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<GetPromptResult, PromptError>> + 'static,
    {
        struct Renderer<F>(F);
        impl<F, Fut> PromptRenderer for Renderer<F>
        where
            F: Fn(PromptArguments, RequestContext) -> Fut + Send + Sync + 'static,
            Fut: Future<Output = Result<GetPromptResult, PromptError>> + 'static,
        {
            fn render(&self, arguments: PromptArguments, ctx: RequestContext) -> PromptFuture {
                Box::pin((self.0)(arguments, ctx))
            }
        }
        Self::from_renderer(name, description, Renderer(render))
    }

    /// A prompt rendered by a [`PromptRenderer`].
    pub fn from_renderer(
        name: impl Into<String>,
        description: impl Into<String>,
        renderer: impl PromptRenderer,
    ) -> Self {
        Self {
            definition: Arc::new(PromptDefinition {
                name: name.into(),
                title: None,
                description: Some(description.into()),
                arguments: Vec::new(),
                icons: Vec::new(),
                meta: None,
            }),
            renderer: Arc::new(renderer),
            completer: None,
        }
    }

    fn definition_mut(&mut self) -> &mut PromptDefinition {
        Arc::make_mut(&mut self.definition)
    }

    /// The prompt's name.
    pub fn name(&self) -> &str {
        &self.definition.name
    }

    /// Declares an argument.
    pub fn argument(mut self, argument: PromptArgument) -> Self {
        self.definition_mut().arguments.push(argument);
        self
    }

    /// Sets a human-readable title (2025-06-18 sessions and newer).
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.definition_mut().title = Some(title.into());
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

    /// Offers completions of the prompt's arguments (`completion/complete` with a
    /// `ref/prompt`), from an async function of the request and its context.
    pub fn complete<F, Fut>(self, complete: F) -> Self
    where
        F: Fn(crate::resource::CompletionRequest, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<String>> + 'static,
    {
        self.completer(crate::resource::CompleteFn(complete))
    }

    /// Offers completions of the prompt's arguments from a [`Completer`].
    pub fn completer(mut self, completer: impl Completer) -> Self {
        self.completer = Some(Arc::new(completer));
        self
    }

    /// Whether the prompt declares an argument called `name`.
    pub(crate) fn has_argument(&self, name: &str) -> bool {
        self.definition.arguments.iter().any(|a| a.name == name)
    }

    /// The first required argument missing from `arguments`.
    pub(crate) fn missing_argument(&self, arguments: &PromptArguments) -> Option<&str> {
        self.definition
            .arguments
            .iter()
            .find(|a| a.required && !arguments.contains_key(&a.name))
            .map(|a| a.name.as_str())
    }
}

impl crate::model::VersionedSerialize for PromptDefinition {
    fn serialize_for<S: Serializer>(
        &self,
        version: ProtocolVersion,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let titles = version.has_titles_and_meta();
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("name", &self.name)?;
        if let (Some(title), true) = (&self.title, titles) {
            map.serialize_entry("title", title)?;
        }
        if let Some(description) = &self.description {
            map.serialize_entry("description", description)?;
        }
        let arguments: Vec<Value> = self
            .arguments
            .iter()
            .map(|a| {
                let mut entry = serde_json::Map::new();
                entry.insert("name".into(), a.name.clone().into());
                if let (Some(title), true) = (&a.title, titles) {
                    entry.insert("title".into(), title.clone().into());
                }
                if let Some(description) = &a.description {
                    entry.insert("description".into(), description.clone().into());
                }
                entry.insert("required".into(), a.required.into());
                Value::Object(entry)
            })
            .collect();
        map.serialize_entry("arguments", &arguments)?;
        if version.has_icons() && !self.icons.is_empty() {
            map.serialize_entry("icons", &self.icons)?;
        }
        if let (Some(meta), true) = (&self.meta, titles) {
            map.serialize_entry("_meta", meta)?;
        }
        map.end()
    }
}
