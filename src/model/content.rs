//! Content blocks (text, image, audio, embedded resource, resource link), their annotations,
//! icons, and the contents of a resource: what tools return, prompts render and resources
//! hold.
//!
//! Each type is written out for a session's protocol version ([`ForVersion`]): fields and
//! blocks that version does not have are left out (a resource link becomes a text block
//! naming the URI), so an old client never sees a shape its schema rejects.

use super::{ForVersion, VersionedSerialize};
use crate::protocol::mcp::ProtocolVersion;
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use std::borrow::Cow;

/// Who a piece of content is meant for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The human user.
    User,
    /// The model.
    Assistant,
}

/// Hints for the client on how to use a piece of content.
///
/// ```
/// use mcp_ws::model::{Annotations, Role};
/// let hints = Annotations { audience: Some(vec![Role::User]), priority: Some(0.8), ..Default::default() };
/// assert_eq!(hints.priority, Some(0.8));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Annotations {
    /// Who the content is for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audience: Option<Vec<Role>>,
    /// How important it is, from 0 (least) to 1 (most).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<f64>,
    /// When it last changed (ISO 8601); sent to 2025-06-18 sessions and newer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_modified: Option<String>,
}

impl VersionedSerialize for Annotations {
    fn serialize_for<S: Serializer>(
        &self,
        version: ProtocolVersion,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        if let Some(audience) = &self.audience {
            map.serialize_entry("audience", audience)?;
        }
        if let Some(priority) = self.priority {
            map.serialize_entry("priority", &priority)?;
        }
        if let (Some(last), true) = (&self.last_modified, version.has_titles_and_meta()) {
            map.serialize_entry("lastModified", last)?;
        }
        map.end()
    }
}

/// An icon for a tool, resource, prompt or the server (sent to 2025-11-25 sessions and
/// newer).
///
/// ```
/// let icon = mcp_ws::model::Icon::new("https://example.com/calc.png").mime_type("image/png");
/// assert_eq!(icon.src, "https://example.com/calc.png");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Icon {
    /// An `https:` or `data:` URI of the image.
    pub src: String,
    /// Its MIME type, when the URI does not say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Sizes it is drawn at (`"48x48"`, `"any"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sizes: Option<Vec<String>>,
    /// `"light"` or `"dark"`: the theme it is made for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub theme: Option<String>,
}

impl Icon {
    /// An icon at `src`.
    pub fn new(src: impl Into<String>) -> Self {
        Self {
            src: src.into(),
            mime_type: None,
            sizes: None,
            theme: None,
        }
    }

    /// Sets its MIME type.
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.mime_type = Some(mime_type.into());
        self
    }
}

/// A JSON string literal kept as the exact text received (quotes and escapes included), so
/// that a tool can pass text through without decoding and escaping it again. Deserializes
/// only from a JSON string; advertised in schemas as `"type": "string"`.
///
/// ```
/// let s: mcp_ws::model::JsonString = serde_json::from_str(r#""caf\u00e9""#).unwrap();
/// assert_eq!(s.as_json(), r#""caf\u00e9""#);
/// ```
#[derive(Debug, Clone)]
pub struct JsonString(Box<RawValue>);

impl JsonString {
    /// The literal as received, quotes included.
    pub fn as_json(&self) -> &str {
        self.0.get()
    }

    /// The decoded text.
    pub fn to_text(&self) -> String {
        serde_json::from_str(self.0.get()).unwrap_or_default()
    }
}

impl PartialEq for JsonString {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

impl<'de> Deserialize<'de> for JsonString {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        if raw.get().starts_with('"') {
            Ok(Self(raw))
        } else {
            // Name the kind, not the value: the value may be megabytes of client input.
            Err(serde::de::Error::invalid_type(
                serde::de::Unexpected::Other("a non-string value"),
                &"a string",
            ))
        }
    }
}

impl Serialize for JsonString {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl schemars::JsonSchema for JsonString {
    fn schema_name() -> Cow<'static, str> {
        String::schema_name()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        String::json_schema(generator)
    }

    fn inline_schema() -> bool {
        true
    }
}

/// The contents of a resource: text, or binary data (sent base64-encoded).
///
/// ```
/// use mcp_ws::model::ResourceContents;
/// let readme = ResourceContents::text("file:///readme.md", "text/markdown", "# Hi");
/// let logo = ResourceContents::blob("file:///logo.png", "image/png", &[0x89, b'P', b'N', b'G']);
/// assert_eq!(logo.uri(), "file:///logo.png");
/// # let _ = readme;
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceContents {
    uri: String,
    mime_type: Option<String>,
    body: Body,
    meta: Option<Value>,
}

#[derive(Debug, Clone, PartialEq)]
enum Body {
    Text(String),
    /// Already base64-encoded.
    Blob(String),
    /// The whole object as another server sent it (`uri` included), written out unchanged.
    Raw(serde_json::Map<String, Value>),
}

impl ResourceContents {
    /// Text contents.
    pub fn text(
        uri: impl Into<String>,
        mime_type: impl Into<String>,
        text: impl Into<String>,
    ) -> Self {
        Self {
            uri: uri.into(),
            mime_type: Some(mime_type.into()),
            body: Body::Text(text.into()),
            meta: None,
        }
    }

    /// Binary contents, base64-encoded here.
    pub fn blob(uri: impl Into<String>, mime_type: impl Into<String>, bytes: &[u8]) -> Self {
        use base64::Engine;
        Self::blob_base64(
            uri,
            mime_type,
            base64::engine::general_purpose::STANDARD.encode(bytes),
        )
    }

    /// Binary contents already base64-encoded.
    pub fn blob_base64(
        uri: impl Into<String>,
        mime_type: impl Into<String>,
        base64: String,
    ) -> Self {
        Self {
            uri: uri.into(),
            mime_type: Some(mime_type.into()),
            body: Body::Blob(base64),
            meta: None,
        }
    }

    /// Attaches `_meta` (sent to 2025-06-18 sessions and newer).
    pub fn with_meta(mut self, meta: Value) -> Self {
        self.meta = Some(meta);
        self
    }

    /// Contents passed on as another server sent them (a gateway's), written out unchanged;
    /// `None` unless the object has a string `uri`.
    ///
    /// ```
    /// let object = serde_json::json!({ "uri": "mem://a", "text": "hi", "x-extra": 1 });
    /// let contents = mcp_ws::model::ResourceContents::raw(object.as_object().unwrap().clone()).unwrap();
    /// assert_eq!((contents.uri(), contents.as_text()), ("mem://a", Some("hi")));
    /// ```
    pub fn raw(object: serde_json::Map<String, Value>) -> Option<Self> {
        let uri = object.get("uri")?.as_str()?.to_owned();
        Some(Self {
            uri,
            mime_type: None,
            body: Body::Raw(object),
            meta: None,
        })
    }

    /// The resource's URI.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// The text, if these are text contents.
    pub fn as_text(&self) -> Option<&str> {
        match &self.body {
            Body::Text(text) => Some(text),
            Body::Raw(object) => object.get("text")?.as_str(),
            Body::Blob(_) => None,
        }
    }
}

impl VersionedSerialize for ResourceContents {
    fn serialize_for<S: Serializer>(
        &self,
        version: ProtocolVersion,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        if let Body::Raw(object) = &self.body {
            return object.serialize(s);
        }
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("uri", &self.uri)?;
        if let Some(mime) = &self.mime_type {
            map.serialize_entry("mimeType", mime)?;
        }
        match &self.body {
            Body::Text(text) => map.serialize_entry("text", text)?,
            Body::Blob(blob) => map.serialize_entry("blob", blob)?,
            Body::Raw(_) => {}
        }
        if let (Some(meta), true) = (&self.meta, version.has_titles_and_meta()) {
            map.serialize_entry("_meta", meta)?;
        }
        map.end()
    }
}

/// A link to a resource, returned by a tool instead of the contents themselves (sent as a
/// `resource_link` block to 2025-06-18 sessions and newer, as a text block naming the URI
/// to older ones).
///
/// ```
/// let link = mcp_ws::model::ResourceLink::new("file:///report.pdf", "report").mime_type("application/pdf");
/// assert_eq!(link.uri, "file:///report.pdf");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceLink {
    /// The resource's URI.
    pub uri: String,
    /// Its name.
    pub name: String,
    /// A human-readable title.
    pub title: Option<String>,
    /// What it is.
    pub description: Option<String>,
    /// Its MIME type.
    pub mime_type: Option<String>,
    /// Its size in bytes.
    pub size: Option<u64>,
}

impl ResourceLink {
    /// A link to `uri` called `name`.
    pub fn new(uri: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            uri: uri.into(),
            name: name.into(),
            title: None,
            description: None,
            mime_type: None,
            size: None,
        }
    }

    /// Sets its MIME type.
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.mime_type = Some(mime_type.into());
        self
    }

    /// Sets its description.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }
}

/// One content block of a tool result or a prompt message.
///
/// ```
/// use mcp_ws::model::{Content, ResourceContents};
/// let blocks = vec![
///     Content::text("Here is the chart:"),
///     Content::image("iVBORw0KGgo=", "image/png"),
///     Content::resource(ResourceContents::text("file:///data.csv", "text/csv", "a,b\n1,2\n")),
/// ];
/// assert_eq!(blocks.len(), 3);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Content {
    kind: Kind,
    annotations: Option<Annotations>,
    meta: Option<Value>,
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Text(String),
    /// Text kept as the JSON string literal it arrived as (see [`JsonString`]).
    JsonText(JsonString),
    Image {
        data: String,
        mime_type: String,
    },
    Audio {
        data: String,
        mime_type: String,
    },
    Resource(ResourceContents),
    Link(ResourceLink),
    /// A block as another server sent it, written out unchanged.
    Raw(serde_json::Map<String, Value>),
}

impl Content {
    fn of(kind: Kind) -> Self {
        Self {
            kind,
            annotations: None,
            meta: None,
        }
    }

    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::of(Kind::Text(text.into()))
    }

    /// A text block written as the JSON string literal it arrived as: never decoded nor
    /// escaped again (see [`JsonString`]).
    pub fn json_text(text: JsonString) -> Self {
        Self::of(Kind::JsonText(text))
    }

    /// An image, base64-encoded.
    pub fn image(data_base64: impl Into<String>, mime_type: impl Into<String>) -> Self {
        Self::of(Kind::Image {
            data: data_base64.into(),
            mime_type: mime_type.into(),
        })
    }

    /// Audio, base64-encoded (sent to 2025-03-26 sessions and newer; older ones get a text
    /// block saying audio was left out).
    pub fn audio(data_base64: impl Into<String>, mime_type: impl Into<String>) -> Self {
        Self::of(Kind::Audio {
            data: data_base64.into(),
            mime_type: mime_type.into(),
        })
    }

    /// A resource embedded with its contents.
    pub fn resource(contents: ResourceContents) -> Self {
        Self::of(Kind::Resource(contents))
    }

    /// A link to a resource.
    pub fn resource_link(link: ResourceLink) -> Self {
        Self::of(Kind::Link(link))
    }

    /// A block passed on as another server sent it (a gateway's): written out unchanged,
    /// whatever its type, to every session.
    ///
    /// ```
    /// let block = serde_json::json!({ "type": "text", "text": "hi", "annotations": { "priority": 1 } });
    /// let content = mcp_ws::model::Content::raw(block.as_object().unwrap().clone());
    /// assert_eq!(content.as_text().as_deref(), Some("hi"));
    /// ```
    pub fn raw(block: serde_json::Map<String, Value>) -> Self {
        Self::of(Kind::Raw(block))
    }

    /// Attaches annotations.
    pub fn with_annotations(mut self, annotations: Annotations) -> Self {
        self.annotations = Some(annotations);
        self
    }

    /// Attaches `_meta` (sent to 2025-06-18 sessions and newer).
    pub fn with_meta(mut self, meta: Value) -> Self {
        self.meta = Some(meta);
        self
    }

    /// The text of a text block.
    pub fn as_text(&self) -> Option<Cow<'_, str>> {
        match &self.kind {
            Kind::Text(text) => Some(Cow::Borrowed(text)),
            Kind::JsonText(text) => Some(Cow::Owned(text.to_text())),
            Kind::Raw(block) if block.get("type").and_then(Value::as_str) == Some("text") => {
                block.get("text")?.as_str().map(Cow::Borrowed)
            }
            _ => None,
        }
    }
}

impl VersionedSerialize for Content {
    fn serialize_for<S: Serializer>(
        &self,
        version: ProtocolVersion,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        if let Kind::Raw(block) = &self.kind {
            return block.serialize(s);
        }
        let mut map = s.serialize_map(None)?;
        match &self.kind {
            Kind::Raw(_) => {}
            Kind::Text(text) => {
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", text)?;
            }
            Kind::JsonText(text) => {
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", text)?;
            }
            Kind::Image { data, mime_type } => {
                map.serialize_entry("type", "image")?;
                map.serialize_entry("data", data)?;
                map.serialize_entry("mimeType", mime_type)?;
            }
            Kind::Audio { data, mime_type } if version.has_audio() => {
                map.serialize_entry("type", "audio")?;
                map.serialize_entry("data", data)?;
                map.serialize_entry("mimeType", mime_type)?;
            }
            Kind::Audio { mime_type, .. } => {
                map.serialize_entry("type", "text")?;
                map.serialize_entry(
                    "text",
                    &format!(
                        "[{mime_type} audio left out: this protocol version has no audio content]"
                    ),
                )?;
            }
            Kind::Resource(contents) => {
                map.serialize_entry("type", "resource")?;
                map.serialize_entry("resource", &ForVersion(contents, version))?;
            }
            Kind::Link(link) if version.has_titles_and_meta() => {
                map.serialize_entry("type", "resource_link")?;
                map.serialize_entry("uri", &link.uri)?;
                map.serialize_entry("name", &link.name)?;
                if let Some(title) = &link.title {
                    map.serialize_entry("title", title)?;
                }
                if let Some(description) = &link.description {
                    map.serialize_entry("description", description)?;
                }
                if let Some(mime) = &link.mime_type {
                    map.serialize_entry("mimeType", mime)?;
                }
                if let Some(size) = link.size {
                    map.serialize_entry("size", &size)?;
                }
            }
            Kind::Link(link) => {
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", &format!("Resource {}: {}", link.name, link.uri))?;
            }
        }
        if let Some(annotations) = &self.annotations {
            map.serialize_entry("annotations", &ForVersion(annotations, version))?;
        }
        if let (Some(meta), true) = (&self.meta, version.has_titles_and_meta()) {
            map.serialize_entry("_meta", meta)?;
        }
        map.end()
    }
}
