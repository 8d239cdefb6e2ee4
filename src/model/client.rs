//! What a tool may ask the client through its context: the client's roots, a model
//! completion (sampling), and input from the user (elicitation, as a form or a URL to visit).

use crate::protocol::mcp::ProtocolVersion;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A root the client exposes: a directory or file the server may work in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Root {
    /// Its URI (`file://…`).
    pub uri: String,
    /// A name for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// One content item of a sampling message.
///
/// ```
/// use mcp_ws::model::SamplingContent;
/// let content = SamplingContent::Text { text: "Hello".into() };
/// assert_eq!(content.as_text(), Some("Hello"));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SamplingContent {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image, base64-encoded.
    Image {
        /// The data.
        data: String,
        /// Its MIME type.
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    /// Audio, base64-encoded.
    Audio {
        /// The data.
        data: String,
        /// Its MIME type.
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    /// Anything else the client sent (tool use and results, newer content kinds), kept as is.
    #[serde(untagged)]
    Other(Value),
}

impl SamplingContent {
    /// The text, if this is text.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Self::Text { text } => Some(text),
            _ => None,
        }
    }
}

/// A message of a sampling conversation.
///
/// ```
/// let message = mcp_ws::model::SamplingMessage::user("What is 2 + 2?");
/// assert_eq!(message.content.as_text(), Some("What is 2 + 2?"));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SamplingMessage {
    /// Who says it.
    pub role: super::Role,
    /// What is said.
    pub content: SamplingContent,
}

impl SamplingMessage {
    /// A text message from the user.
    pub fn user(text: impl Into<String>) -> Self {
        Self {
            role: super::Role::User,
            content: SamplingContent::Text { text: text.into() },
        }
    }
}

/// A request for a model completion (`sampling/createMessage`).
///
/// ```
/// use mcp_ws::model::{CreateMessageRequest, SamplingMessage};
/// let request = CreateMessageRequest::new(vec![SamplingMessage::user("Summarise this")], 200)
///     .system_prompt("Be brief.");
/// assert_eq!(request.max_tokens, 200);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateMessageRequest {
    /// The conversation so far.
    pub messages: Vec<SamplingMessage>,
    /// The most tokens to generate.
    pub max_tokens: u32,
    /// A system prompt the client may use.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Sampling temperature.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Further members sent as given (`modelPreferences`, `includeContext`, `stopSequences`,
    /// `metadata`, …).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl CreateMessageRequest {
    /// A request over `messages` for at most `max_tokens` tokens.
    pub fn new(messages: Vec<SamplingMessage>, max_tokens: u32) -> Self {
        Self {
            messages,
            max_tokens,
            system_prompt: None,
            temperature: None,
            extra: Map::new(),
        }
    }

    /// Sets the system prompt.
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.system_prompt = Some(prompt.into());
        self
    }
}

/// The client's answer to a sampling request.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateMessageResult {
    /// Who speaks (the assistant).
    pub role: super::Role,
    /// What the model said.
    pub content: SamplingContent,
    /// Which model answered.
    pub model: String,
    /// Why generation stopped.
    #[serde(default)]
    pub stop_reason: Option<String>,
}

/// A request for input from the user (`elicitation/create`): a form described by a flat
/// JSON schema, or (2025-11-25) a URL the user should visit.
///
/// ```
/// use mcp_ws::model::ElicitRequest;
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Confirm { ok: bool }
/// let form = ElicitRequest::form_for::<Confirm>("Go ahead?");
/// let url = ElicitRequest::url("Sign in to continue", "https://example.com/login", "login-1");
/// # let _ = (form, url);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum ElicitRequest {
    /// A form.
    Form {
        /// What to ask.
        message: String,
        /// The JSON schema of the answer: an object of primitive properties.
        requested_schema: Value,
    },
    /// A URL to visit (out of band: the answer does not come back through MCP).
    Url {
        /// Why.
        message: String,
        /// Where to go.
        url: String,
        /// Identifies this elicitation in a later `notifications/elicitation/complete`.
        elicitation_id: String,
    },
}

impl ElicitRequest {
    /// A form with this schema.
    pub fn form(message: impl Into<String>, requested_schema: Value) -> Self {
        Self::Form {
            message: message.into(),
            requested_schema,
        }
    }

    /// A form whose schema is `T`'s (a struct of primitive fields).
    pub fn form_for<T: JsonSchema>(message: impl Into<String>) -> Self {
        let mut schema = serde_json::to_value(schemars::schema_for!(T)).unwrap_or_default();
        if let Some(object) = schema.as_object_mut() {
            object.remove("$schema");
            object.remove("title");
        }
        Self::form(message, schema)
    }

    /// A URL to visit.
    pub fn url(
        message: impl Into<String>,
        url: impl Into<String>,
        elicitation_id: impl Into<String>,
    ) -> Self {
        Self::Url {
            message: message.into(),
            url: url.into(),
            elicitation_id: elicitation_id.into(),
        }
    }

    /// The request's params on the wire, for a session on `version`. `mode` appeared in
    /// 2025-11-25 (where a missing one means a form): a 2025-06-18 client gets none, since
    /// its schema has no such member.
    pub(crate) fn to_params(&self, version: ProtocolVersion) -> Value {
        match self {
            Self::Form {
                message,
                requested_schema,
            } if version.has_icons() => {
                serde_json::json!({ "mode": "form", "message": message, "requestedSchema": requested_schema })
            }
            Self::Form {
                message,
                requested_schema,
            } => {
                serde_json::json!({ "message": message, "requestedSchema": requested_schema })
            }
            // 2026-07-28 dropped `elicitationId` (no completion notification any more).
            Self::Url { message, url, .. } if version.is_stateless() => {
                serde_json::json!({ "mode": "url", "message": message, "url": url })
            }
            Self::Url {
                message,
                url,
                elicitation_id,
            } => {
                serde_json::json!({ "mode": "url", "message": message, "url": url, "elicitationId": elicitation_id })
            }
        }
    }
}

/// What the user did with an elicitation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ElicitAction {
    /// Answered (the content holds the answer).
    Accept,
    /// Explicitly said no.
    Decline,
    /// Dismissed it without choosing.
    Cancel,
}

/// The client's answer to an elicitation.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ElicitResult {
    /// What the user did.
    pub action: ElicitAction,
    /// The answer, when accepted (form mode).
    #[serde(default)]
    pub content: Option<Map<String, Value>>,
}

impl ElicitResult {
    /// The accepted answer parsed as `T`; `None` when the user did not accept or the answer
    /// does not fit `T`.
    pub fn parse<T: DeserializeOwned>(&self) -> Option<T> {
        match (self.action, &self.content) {
            (ElicitAction::Accept, Some(content)) => {
                serde_json::from_value(Value::Object(content.clone())).ok()
            }
            _ => None,
        }
    }
}
