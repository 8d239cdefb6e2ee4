//! What tools, prompts and completions answer with, tool annotations, and the
//! `Implementation` that names a server or client.

use super::content::{Content, Icon};
use super::{ForVersion, VersionedSerialize};
use crate::protocol::mcp::ProtocolVersion;
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The result of a tool call: content blocks, optional structured content, and whether the
/// call failed as a tool (a result the model can read, not a protocol error).
///
/// ```
/// use mcp_ws::model::CallToolResult;
/// let ok = CallToolResult::text("42");
/// let failed = CallToolResult::error("the city is unknown");
/// assert!(!ok.is_error && failed.is_error);
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CallToolResult {
    /// The content blocks.
    pub content: Vec<Content>,
    /// Structured output, matching the tool's `outputSchema` (sent to 2025-06-18 sessions and
    /// newer; the content blocks should carry the same as text for older ones).
    pub structured_content: Option<Value>,
    /// Whether the tool failed.
    pub is_error: bool,
    /// `_meta` of the result.
    pub meta: Option<Value>,
}

impl CallToolResult {
    /// A successful result of these blocks.
    pub fn new(content: Vec<Content>) -> Self {
        Self {
            content,
            ..Self::default()
        }
    }

    /// A successful result of one text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::new(vec![Content::text(text)])
    }

    /// A failed result (`isError: true`) of one text block.
    pub fn error(text: impl Into<String>) -> Self {
        Self {
            is_error: true,
            ..Self::text(text)
        }
    }

    /// Sets the structured content.
    pub fn with_structured(mut self, value: Value) -> Self {
        self.structured_content = Some(value);
        self
    }
}

impl VersionedSerialize for CallToolResult {
    fn serialize_for<S: Serializer>(
        &self,
        version: ProtocolVersion,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("content", &ForVersion(&self.content, version))?;
        if let (Some(structured), true) = (&self.structured_content, version.has_titles_and_meta())
        {
            map.serialize_entry("structuredContent", structured)?;
        }
        if self.is_error {
            map.serialize_entry("isError", &true)?;
        }
        if let Some(meta) = &self.meta {
            map.serialize_entry("_meta", meta)?;
        }
        map.end()
    }
}

/// Hints about what a tool does (sent to 2025-03-26 sessions and newer). Hints, not
/// guarantees: clients must not trust them from untrusted servers.
///
/// ```
/// let hints = mcp_ws::model::ToolAnnotations { read_only_hint: Some(true), ..Default::default() };
/// assert_eq!(hints.read_only_hint, Some(true));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolAnnotations {
    /// A human-readable title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The tool does not change its environment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// The tool may destroy or overwrite (when not read-only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// Calling it again with the same arguments has no further effect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// The tool reaches outside (the web, other systems).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

/// The name and version of a server or client, and (newer versions) how it presents itself.
///
/// ```
/// let info = mcp_ws::model::Implementation::new("calculator", "1.0.0");
/// assert_eq!(info.name, "calculator");
/// ```
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Implementation {
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// A human-readable title (2025-06-18 and newer).
    #[serde(default)]
    pub title: Option<String>,
    /// What it is (2025-11-25 and newer).
    #[serde(default)]
    pub description: Option<String>,
    /// Its website (2025-11-25 and newer).
    #[serde(default)]
    pub website_url: Option<String>,
    /// Its icons (2025-11-25 and newer).
    #[serde(default)]
    pub icons: Vec<Icon>,
}

impl Implementation {
    /// An implementation called `name` at `version`.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
            ..Self::default()
        }
    }
}

impl VersionedSerialize for Implementation {
    fn serialize_for<S: Serializer>(
        &self,
        version: ProtocolVersion,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("name", &self.name)?;
        map.serialize_entry("version", &self.version)?;
        if let (Some(title), true) = (&self.title, version.has_titles_and_meta()) {
            map.serialize_entry("title", title)?;
        }
        if version.has_icons() {
            if let Some(description) = &self.description {
                map.serialize_entry("description", description)?;
            }
            if let Some(url) = &self.website_url {
                map.serialize_entry("websiteUrl", url)?;
            }
            if !self.icons.is_empty() {
                map.serialize_entry("icons", &self.icons)?;
            }
        }
        map.end()
    }
}

/// One message of a rendered prompt.
///
/// ```
/// use mcp_ws::model::{Content, PromptMessage, Role};
/// let message = PromptMessage::new(Role::User, Content::text("Please greet Ada."));
/// assert_eq!(message.role, Role::User);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct PromptMessage {
    /// Who says it.
    pub role: super::Role,
    /// What is said.
    pub content: Content,
}

impl PromptMessage {
    /// A message.
    pub fn new(role: super::Role, content: Content) -> Self {
        Self { role, content }
    }

    /// A text message from the user.
    pub fn user(text: impl Into<String>) -> Self {
        Self::new(super::Role::User, Content::text(text))
    }
}

impl VersionedSerialize for PromptMessage {
    fn serialize_for<S: Serializer>(
        &self,
        version: ProtocolVersion,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(2))?;
        map.serialize_entry("role", &self.role)?;
        map.serialize_entry("content", &ForVersion(&self.content, version))?;
        map.end()
    }
}

/// A rendered prompt: `prompts/get`'s result.
///
/// ```
/// use mcp_ws::model::{GetPromptResult, PromptMessage};
/// let result = GetPromptResult::new(vec![PromptMessage::user("Hello")]).description("A greeting");
/// assert_eq!(result.messages.len(), 1);
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GetPromptResult {
    /// What the rendered prompt is.
    pub description: Option<String>,
    /// Its messages.
    pub messages: Vec<PromptMessage>,
}

impl GetPromptResult {
    /// A result of these messages.
    pub fn new(messages: Vec<PromptMessage>) -> Self {
        Self {
            description: None,
            messages,
        }
    }

    /// Sets the description.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }
}

impl VersionedSerialize for GetPromptResult {
    fn serialize_for<S: Serializer>(
        &self,
        version: ProtocolVersion,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        if let Some(description) = &self.description {
            map.serialize_entry("description", description)?;
        }
        map.serialize_entry("messages", &ForVersion(&self.messages, version))?;
        map.end()
    }
}

/// Completion candidates for an argument: `completion/complete`'s answer. At most 100 values
/// are sent; `total` and `hasMore` say how many there were.
///
/// ```
/// let completion = mcp_ws::model::Completion::new(vec!["Ada".into(), "Alan".into()]);
/// assert_eq!(completion.values.len(), 2);
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Completion {
    /// The candidates, best first.
    pub values: Vec<String>,
}

impl Completion {
    /// Candidates.
    pub fn new(values: Vec<String>) -> Self {
        Self { values }
    }
}

impl Serialize for Completion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        /// MCP: "Maximum of 100 items" per response.
        const MAX: usize = 100;
        let total = self.values.len();
        let mut map = s.serialize_map(Some(3))?;
        map.serialize_entry("values", &self.values[..total.min(MAX)])?;
        map.serialize_entry("total", &total)?;
        map.serialize_entry("hasMore", &(total > MAX))?;
        map.end()
    }
}
