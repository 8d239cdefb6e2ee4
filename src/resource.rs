//! Resources: fixed URIs ([`Resource`]) and URI templates ([`ResourceTemplate`], RFC 6570
//! level 1: `file:///logs/{date}.txt`), each read by async code that runs in a worker like a
//! tool call: a read that waits (awaits I/O, a timer) does not hold up its session, and one
//! that panics is answered -32603 while the session lives on. A worker runs on its
//! session's thread, so a read that blocks it (synchronous I/O, long computation) stalls
//! that thread: hand such work to `tokio::task::spawn_blocking`. Template variables, like
//! prompt arguments, can offer completions.

use crate::context::RequestContext;
use crate::model::{Annotations, Icon, ProtocolVersion, ResourceContents};
use futures_util::future::LocalBoxFuture;
use serde::ser::{SerializeMap, Serializer};
use serde_json::Value;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

/// What a read's future resolves to.
pub type ResourceFuture = LocalBoxFuture<'static, Result<Vec<ResourceContents>, ResourceError>>;

/// Why a resource could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ResourceError {
    /// There is no resource at this URI (answered -32002, or -32602 under 2026-07-28).
    #[error("Resource not found")]
    NotFound,
    /// The resource is larger than the server sends.
    #[error("Resource too large: {size} bytes, the limit is {limit}")]
    TooLarge {
        /// Its size in bytes.
        size: u64,
        /// The limit in bytes.
        limit: u64,
    },
    /// The read failed; the message is sent to the client, so it must not hold secrets.
    #[error("Resource unavailable: {0}")]
    Failed(String),
    /// The answer would not fit in one message (`limits.max_message_bytes`, with the
    /// contents encoded: base64 for a blob, JSON escapes for text).
    #[error("Resource too large: its answer would take {encoded} bytes, over limits.max_message_bytes ({limit})")]
    OverMessageLimit {
        /// The resource's size in bytes.
        size: u64,
        /// What its answer would take (at least), in bytes.
        encoded: u64,
        /// `limits.max_message_bytes`.
        limit: u64,
    },
    /// Answered as this JSON-RPC error (a gateway's upstream answered with it).
    #[error(transparent)]
    Rpc(crate::model::RpcError),
    /// The server reads as much as it may at once; retry later.
    #[error("Server busy: {}, retry later", .scope.describe())]
    Busy {
        /// Which limit is reached.
        scope: BusyScope,
        /// Its value.
        limit: u64,
    },
}

/// Which read limit a [`ResourceError::Busy`] reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BusyScope {
    /// `resources.max_concurrent_reads`: no read became free within `resources.read_wait_ms`.
    FileReads,
    /// `resources.max_read_bytes_in_flight`: the bytes of files being read.
    FileBytes,
}

impl BusyScope {
    /// The name in the error's `data.scope`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FileReads => "fileReads",
            Self::FileBytes => "fileBytes",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Self::FileReads => "too many file reads at once",
            Self::FileBytes => "too many bytes of files being read at once",
        }
    }
}

/// Reads a resource.
pub trait ResourceReader: Send + Sync + 'static {
    /// Reads the resource at `uri`.
    fn read(&self, uri: &str, ctx: RequestContext) -> ResourceFuture;
}

/// A resource at a fixed URI.
///
/// ```
/// use mcp_ws::{Resource, model::ResourceContents};
/// let fixed = Resource::text("mem://motd", "motd", "text/plain", "Hello!");
/// let live = Resource::new("mem://time", "time", |_ctx| async {
///     Ok(ResourceContents::text("mem://time", "text/plain", "12:00"))
/// })
/// .description("The server's clock");
/// # let _ = (fixed, live);
/// ```
#[derive(Clone)]
pub struct Resource {
    pub(crate) definition: Arc<ResourceDefinition>,
    pub(crate) reader: Arc<dyn ResourceReader>,
}

/// What `resources/list` says of a resource.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ResourceDefinition {
    pub uri: String,
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub mime_type: Option<String>,
    pub size: Option<u64>,
    pub annotations: Option<Annotations>,
    pub icons: Vec<Icon>,
    pub meta: Option<Value>,
}

impl Resource {
    /// A resource read by `read`, an async function of the request's context.
    pub fn new<F, Fut>(uri: impl Into<String>, name: impl Into<String>, read: F) -> Self
    where
        F: Fn(RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ResourceContents, ResourceError>> + 'static,
    {
        struct Reader<F>(F);
        impl<F, Fut> ResourceReader for Reader<F>
        where
            F: Fn(RequestContext) -> Fut + Send + Sync + 'static,
            Fut: Future<Output = Result<ResourceContents, ResourceError>> + 'static,
        {
            fn read(&self, _uri: &str, ctx: RequestContext) -> ResourceFuture {
                let read = (self.0)(ctx);
                Box::pin(async move { read.await.map(|contents| vec![contents]) })
            }
        }
        Self::from_reader(uri, name, Reader(read))
    }

    /// A resource read by a [`ResourceReader`].
    pub fn from_reader(
        uri: impl Into<String>,
        name: impl Into<String>,
        reader: impl ResourceReader,
    ) -> Self {
        Self {
            definition: Arc::new(ResourceDefinition {
                uri: uri.into(),
                name: name.into(),
                title: None,
                description: None,
                mime_type: None,
                size: None,
                annotations: None,
                icons: Vec::new(),
                meta: None,
            }),
            reader: Arc::new(reader),
        }
    }

    /// A resource whose contents are this text.
    pub fn text(
        uri: impl Into<String>,
        name: impl Into<String>,
        mime_type: &str,
        text: impl Into<String>,
    ) -> Self {
        let uri = uri.into();
        let contents = ResourceContents::text(uri.clone(), mime_type, text);
        Self::fixed(uri, name, mime_type, contents)
    }

    /// A resource whose contents are these bytes (sent base64-encoded).
    pub fn blob(
        uri: impl Into<String>,
        name: impl Into<String>,
        mime_type: &str,
        bytes: &[u8],
    ) -> Self {
        let uri = uri.into();
        let contents = ResourceContents::blob(uri.clone(), mime_type, bytes);
        Self::fixed(uri, name, mime_type, contents).size(bytes.len() as u64)
    }

    fn fixed(
        uri: String,
        name: impl Into<String>,
        mime_type: &str,
        contents: ResourceContents,
    ) -> Self {
        struct Fixed(ResourceContents);
        impl ResourceReader for Fixed {
            fn read(&self, _uri: &str, _ctx: RequestContext) -> ResourceFuture {
                Box::pin(std::future::ready(Ok(vec![self.0.clone()])))
            }
        }
        Self::from_reader(uri, name, Fixed(contents)).mime_type(mime_type)
    }

    fn definition_mut(&mut self) -> &mut ResourceDefinition {
        Arc::make_mut(&mut self.definition)
    }

    /// The resource's URI.
    pub fn uri(&self) -> &str {
        &self.definition.uri
    }

    /// Sets a human-readable title (2025-06-18 sessions and newer).
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.definition_mut().title = Some(title.into());
        self
    }

    /// Sets the description.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.definition_mut().description = Some(description.into());
        self
    }

    /// Sets the MIME type.
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.definition_mut().mime_type = Some(mime_type.into());
        self
    }

    /// Sets the size in bytes.
    pub fn size(mut self, size: u64) -> Self {
        self.definition_mut().size = Some(size);
        self
    }

    /// Sets annotations.
    pub fn annotations(mut self, annotations: Annotations) -> Self {
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
}

/// The variables of a URI matched against a template, percent-decoded.
pub type TemplateVariables = HashMap<String, String>;

/// Reads resources whose URIs match a template.
pub trait TemplateReader: Send + Sync + 'static {
    /// Reads the resource at `uri`, whose template variables are `variables`.
    fn read(&self, uri: &str, variables: TemplateVariables, ctx: RequestContext) -> ResourceFuture;
}

/// What a completion request asks: candidates for `argument`, whose value so far is `value`,
/// given the other arguments already chosen (`context`, 2025-06-18 clients).
#[derive(Debug, Clone, PartialEq)]
pub struct CompletionRequest {
    /// The argument (prompt argument or template variable) being completed.
    pub argument: String,
    /// What the user typed so far.
    pub value: String,
    /// Other arguments already chosen.
    pub context: HashMap<String, String>,
}

/// Offers completion candidates.
pub trait Completer: Send + Sync + 'static {
    /// Candidates for `request`, best first.
    fn complete(
        &self,
        request: CompletionRequest,
        ctx: RequestContext,
    ) -> LocalBoxFuture<'static, Vec<String>>;
}

/// A [`Completer`] written as an async function.
pub(crate) struct CompleteFn<F>(pub F);

impl<F, Fut> Completer for CompleteFn<F>
where
    F: Fn(CompletionRequest, RequestContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Vec<String>> + 'static,
{
    fn complete(
        &self,
        request: CompletionRequest,
        ctx: RequestContext,
    ) -> LocalBoxFuture<'static, Vec<String>> {
        Box::pin((self.0)(request, ctx))
    }
}

/// Resources whose URIs follow a template (RFC 6570, level 1: `{name}` expands to one
/// percent-encoded value).
///
/// ```
/// use mcp_ws::{ResourceTemplate, model::ResourceContents};
/// let users = ResourceTemplate::new("users://{id}/profile", "profile", |uri, vars, _ctx| async move {
///     Ok(ResourceContents::text(uri, "application/json", format!(r#"{{"id":"{}"}}"#, vars["id"])))
/// })
/// .complete(|request, _ctx| async move {
///     ["ada", "alan"].iter().filter(|id| id.starts_with(&request.value)).map(|s| s.to_string()).collect()
/// });
/// # let _ = users;
/// ```
#[derive(Clone)]
pub struct ResourceTemplate {
    pub(crate) definition: Arc<TemplateDefinition>,
    pub(crate) template: Result<UriTemplate, String>,
    pub(crate) reader: Arc<dyn TemplateReader>,
    pub(crate) completer: Option<Arc<dyn Completer>>,
}

/// What `resources/templates/list` says of a template.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TemplateDefinition {
    pub uri_template: String,
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub mime_type: Option<String>,
    pub annotations: Option<Annotations>,
    pub icons: Vec<Icon>,
    pub meta: Option<Value>,
}

impl ResourceTemplate {
    /// Resources matching `uri_template`, read by `read`, an async function of the URI, its
    /// variables and the request's context. An invalid template is refused when it is
    /// registered.
    pub fn new<F, Fut>(uri_template: impl Into<String>, name: impl Into<String>, read: F) -> Self
    where
        F: Fn(String, TemplateVariables, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ResourceContents, ResourceError>> + 'static,
    {
        struct Reader<F>(F);
        impl<F, Fut> TemplateReader for Reader<F>
        where
            F: Fn(String, TemplateVariables, RequestContext) -> Fut + Send + Sync + 'static,
            Fut: Future<Output = Result<ResourceContents, ResourceError>> + 'static,
        {
            fn read(
                &self,
                uri: &str,
                variables: TemplateVariables,
                ctx: RequestContext,
            ) -> ResourceFuture {
                let read = (self.0)(uri.to_owned(), variables, ctx);
                Box::pin(async move { read.await.map(|contents| vec![contents]) })
            }
        }
        Self::from_reader(uri_template, name, Reader(read))
    }

    /// Resources matching `uri_template`, read by a [`TemplateReader`].
    pub fn from_reader(
        uri_template: impl Into<String>,
        name: impl Into<String>,
        reader: impl TemplateReader,
    ) -> Self {
        let uri_template = uri_template.into();
        Self {
            template: UriTemplate::parse(&uri_template),
            definition: Arc::new(TemplateDefinition {
                uri_template,
                name: name.into(),
                title: None,
                description: None,
                mime_type: None,
                annotations: None,
                icons: Vec::new(),
                meta: None,
            }),
            reader: Arc::new(reader),
            completer: None,
        }
    }

    fn definition_mut(&mut self) -> &mut TemplateDefinition {
        Arc::make_mut(&mut self.definition)
    }

    /// The template.
    pub fn uri_template(&self) -> &str {
        &self.definition.uri_template
    }

    /// Sets a human-readable title (2025-06-18 sessions and newer).
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.definition_mut().title = Some(title.into());
        self
    }

    /// Sets the description.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.definition_mut().description = Some(description.into());
        self
    }

    /// Sets the MIME type of the resources.
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.definition_mut().mime_type = Some(mime_type.into());
        self
    }

    /// Sets annotations of the resources.
    pub fn annotations(mut self, annotations: Annotations) -> Self {
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

    /// Whether the template has a variable called `name`.
    pub(crate) fn has_variable(&self, name: &str) -> bool {
        self.template
            .as_ref()
            .is_ok_and(|t| t.variables().any(|v| v == name))
    }

    /// Offers completions of the template's variables (`completion/complete` with a
    /// `ref/resource`), from an async function of the request and its context.
    pub fn complete<F, Fut>(self, complete: F) -> Self
    where
        F: Fn(CompletionRequest, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<String>> + 'static,
    {
        self.completer(CompleteFn(complete))
    }

    /// Offers completions of the template's variables from a [`Completer`].
    pub fn completer(mut self, completer: impl Completer) -> Self {
        self.completer = Some(Arc::new(completer));
        self
    }
}

/// A parsed RFC 6570 level-1 template: literals and `{variable}`s.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct UriTemplate {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Literal(String),
    Variable(String),
}

/// A template as an error quotes it: its first 200 bytes, then `…` (an upstream's template
/// may be as long as a message, and the error is logged).
struct Quoted<'a>(&'a str);

impl std::fmt::Debug for Quoted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cut = crate::floor_char_boundary(self.0, 200);
        std::fmt::Debug::fmt(&self.0[..cut], f)?;
        if cut < self.0.len() {
            f.write_str("…")?;
        }
        Ok(())
    }
}

impl UriTemplate {
    pub(crate) fn parse(template: &str) -> Result<Self, String> {
        if template.is_empty() {
            return Err("an empty template".to_owned());
        }
        let quoted = Quoted(template);
        let mut parts = Vec::new();
        let mut names = std::collections::HashSet::new();
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Part::Literal(rest[..open].to_owned()));
            }
            let Some(close) = rest[open..].find('}') else {
                return Err(format!("unclosed '{{' in {quoted:?}"));
            };
            let name = &rest[open + 1..open + close];
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!(
                    "{{{name}}} in {quoted:?}: only level-1 variables ({{name}}) are supported"
                ));
            }
            if matches!(parts.last(), Some(Part::Variable(_))) {
                return Err(format!(
                    "two variables without a literal between them in {quoted:?}"
                ));
            }
            // A URI gives each variable one value: a second would overwrite the first.
            // A set, not a look through the parts: an upstream's template may name as many
            // variables as a message holds.
            if !names.insert(name) {
                return Err(format!("{{{name}}} twice in {quoted:?}"));
            }
            parts.push(Part::Variable(name.to_owned()));
            rest = &rest[open + close + 1..];
        }
        if rest.contains('}') {
            return Err(format!("unmatched '}}' in {quoted:?}"));
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_owned()));
        }
        Ok(Self { parts })
    }

    /// The variables of `uri` if it matches: each variable takes a non-empty run of
    /// characters up to the next literal, without `/`, and is percent-decoded. A value is
    /// one path segment once decoded too: one that decodes to a `/`, a `\`, a control
    /// character, `.` or `..` does not match, so that a reader building a path from it
    /// (`/var/logs/{date}.txt`) cannot be led out of its directory (`..%2F..%2Fetc%2Fpasswd`).
    pub(crate) fn matches(&self, uri: &str) -> Option<TemplateVariables> {
        let mut variables = TemplateVariables::new();
        let mut rest = uri;
        let mut parts = self.parts.iter().peekable();
        while let Some(part) = parts.next() {
            match part {
                Part::Literal(literal) => rest = rest.strip_prefix(literal.as_str())?,
                Part::Variable(name) => {
                    let end = match parts.peek() {
                        Some(Part::Literal(next)) => rest.find(next.as_str())?,
                        _ => rest.len(),
                    };
                    let raw = &rest[..end];
                    if raw.is_empty() || raw.contains('/') {
                        return None;
                    }
                    let value = percent_decode(raw).filter(|value| is_one_segment(value))?;
                    variables.insert(name.clone(), value);
                    rest = &rest[end..];
                }
            }
        }
        rest.is_empty().then_some(variables)
    }

    /// The variable names, in order.
    pub(crate) fn variables(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::Variable(name) => Some(name.as_str()),
            Part::Literal(_) => None,
        })
    }
}

/// Whether a decoded variable is a path segment no reader can take for more: see
/// [`UriTemplate::matches`].
fn is_one_segment(value: &str) -> bool {
    value != "."
        && value != ".."
        && !value
            .chars()
            .any(|c| c == '/' || c == '\\' || c.is_control())
}

/// `uri` in the form RFC 3986 (§6.2.2.1 and §6.2.2.2) makes equivalent to it: each
/// percent-escape of an unreserved character (letters, digits, `-._~`) decoded, the hex
/// digits of the others upper-cased; borrowed when it is that already. A client may spell a
/// listed URI either way (`file:///a%2fb` for the listed `file:///a%2Fb`). Only these
/// escapes are touched: decoding `%2F` or `%25` would change what the URI names.
pub(crate) fn normalized_uri(uri: &str) -> std::borrow::Cow<'_, str> {
    let bytes = uri.as_bytes();
    let escape_at = |i: usize| -> Option<u8> {
        let hex = uri.get(i + 1..i + 3)?;
        // `from_str_radix` alone would take a sign (`%+F`).
        hex.bytes()
            .all(|b| b.is_ascii_hexdigit())
            .then(|| u8::from_str_radix(hex, 16).ok())?
    };
    let differs = |i: usize| {
        escape_at(i).is_some_and(|byte| {
            is_unreserved(byte) || bytes[i + 1..i + 3].iter().any(u8::is_ascii_lowercase)
        })
    };
    let Some(first) = memchr::memchr_iter(b'%', bytes).find(|&i| differs(i)) else {
        return std::borrow::Cow::Borrowed(uri);
    };
    let mut out = String::with_capacity(uri.len());
    out.push_str(&uri[..first]);
    let mut i = first;
    while i < bytes.len() {
        match (bytes[i], escape_at(i)) {
            (b'%', Some(byte)) => {
                if is_unreserved(byte) {
                    out.push(char::from(byte));
                } else {
                    out.push('%');
                    out.push_str(&uri[i + 1..i + 3].to_ascii_uppercase());
                }
                i += 3;
            }
            _ => {
                // Up to the next `%`: a whole character, since `%` is ASCII.
                let next = memchr::memchr(b'%', &bytes[i + 1..]).map_or(bytes.len(), |n| i + 1 + n);
                out.push_str(&uri[i..next]);
                i = next;
            }
        }
    }
    std::borrow::Cow::Owned(out)
}

/// RFC 3986's unreserved characters: the ones whose escapes mean the character itself.
fn is_unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}

/// `text` with each `%XX` (two hex digits) decoded; `None` if it is not UTF-8 then, or a
/// `%` is not followed by two hex digits.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            // `from_str_radix` alone would take a sign (`%+F`).
            if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

impl crate::model::VersionedSerialize for ResourceDefinition {
    fn serialize_for<S: Serializer>(
        &self,
        version: ProtocolVersion,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("uri", &self.uri)?;
        map.serialize_entry("name", &self.name)?;
        if let (Some(title), true) = (&self.title, version.has_titles_and_meta()) {
            map.serialize_entry("title", title)?;
        }
        if let Some(description) = &self.description {
            map.serialize_entry("description", description)?;
        }
        if let Some(mime) = &self.mime_type {
            map.serialize_entry("mimeType", mime)?;
        }
        if let Some(size) = self.size {
            map.serialize_entry("size", &size)?;
        }
        if let Some(annotations) = &self.annotations {
            map.serialize_entry(
                "annotations",
                &crate::model::ForVersion(annotations, version),
            )?;
        }
        if version.has_icons() && !self.icons.is_empty() {
            map.serialize_entry("icons", &self.icons)?;
        }
        if let (Some(meta), true) = (&self.meta, version.has_titles_and_meta()) {
            map.serialize_entry("_meta", meta)?;
        }
        map.end()
    }
}

impl crate::model::VersionedSerialize for TemplateDefinition {
    fn serialize_for<S: Serializer>(
        &self,
        version: ProtocolVersion,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("uriTemplate", &self.uri_template)?;
        map.serialize_entry("name", &self.name)?;
        if let (Some(title), true) = (&self.title, version.has_titles_and_meta()) {
            map.serialize_entry("title", title)?;
        }
        if let Some(description) = &self.description {
            map.serialize_entry("description", description)?;
        }
        if let Some(mime) = &self.mime_type {
            map.serialize_entry("mimeType", mime)?;
        }
        if let Some(annotations) = &self.annotations {
            map.serialize_entry(
                "annotations",
                &crate::model::ForVersion(annotations, version),
            )?;
        }
        if version.has_icons() && !self.icons.is_empty() {
            map.serialize_entry("icons", &self.icons)?;
        }
        if let (Some(meta), true) = (&self.meta, version.has_titles_and_meta()) {
            map.serialize_entry("_meta", meta)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn uris_are_normalized_as_rfc_3986_makes_them_equivalent() {
        use std::borrow::Cow;
        for plain in [
            "",
            "file:///a/b",
            "x://a%20b%2F%C3%A9",
            "50%",
            "a%zz%4",
            "%+F",
        ] {
            assert!(
                matches!(normalized_uri(plain), Cow::Borrowed(_)),
                "{plain:?} is normal already"
            );
        }
        for (spelled, normal) in [
            ("x://%72eadme", "x://readme"),
            ("x://a%2fb%2F", "x://a%2Fb%2F"),
            ("x://%c3%A9/%7e%2d%5F%2e", "x://%C3%A9/~-_."),
            ("x://%2e%2e/%252e", "x://../%252e"),
            ("é%41%", "éA%"),
            ("%4", "%4"),
        ] {
            assert_eq!(normalized_uri(spelled), normal, "{spelled:?}");
        }
    }

    use super::*;

    #[test]
    fn level_one_templates_match_and_decode() {
        let t = UriTemplate::parse("test://template/{id}/data").expect("valid");
        let vars = t.matches("test://template/42/data").expect("matches");
        assert_eq!(vars["id"], "42");
        assert_eq!(
            t.matches("test://template/a%20b/data").expect("matches")["id"],
            "a b"
        );
        assert!(t.matches("test://template//data").is_none());
        for outside in [
            "..",
            ".",
            "..%2F..%2Fetc",
            "a%5Cb",
            "a%00",
            "%2e%2E",
            "%+F",
            "%F",
        ] {
            let uri = format!("test://template/{outside}/data");
            assert!(t.matches(&uri).is_none(), "{uri}");
        }
        assert_eq!(
            t.matches("test://template/..a/data").expect("matches")["id"],
            "..a"
        );
        assert!(t.matches("test://template/4/2/data").is_none());
        assert!(t.matches("test://template/42/datax").is_none());
        let two = UriTemplate::parse("db://{table}/{row}").expect("valid");
        let vars = two.matches("db://users/7").expect("matches");
        assert_eq!(
            (vars["table"].as_str(), vars["row"].as_str()),
            ("users", "7")
        );
        assert_eq!(two.variables().collect::<Vec<_>>(), ["table", "row"]);
    }

    #[test]
    fn templates_beyond_level_one_are_refused() {
        for bad in [
            "x://{+path}",
            "x://{a,b}",
            "x://{a",
            "x://a}",
            "x://{a}{b}",
            "x://{}",
        ] {
            assert!(UriTemplate::parse(bad).is_err(), "{bad}");
        }
    }
}
