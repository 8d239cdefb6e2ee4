//! Payload types of the methods and notifications the server handles, and the log levels.
//! Params are parsed once, straight into these types, borrowing from the frame.

use crate::protocol::jsonrpc::RequestId;
use crate::protocol::mcp::bounded::Bounded;
use crate::protocol::mcp::methods::{Method, Target};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::borrow::Cow;

/// Parses a JSON object (params, or a tool's arguments) straight into `T`; absent reads as
/// `{}`. Anything but an object is refused here, for every caller: a derived struct would
/// also accept an array. The error names the offending member (`uri: invalid type: …`),
/// without serde_json's line/column suffix.
///
/// Both passes read through [`Bounded`], so that an error quotes at most the beginning of a
/// string the client sent: serde words its error as it makes it, and would quote the whole
/// value (about 200 ns a character that needs an escape, 250 ms for 3.5 MB). The plain parse
/// runs first; only a failure pays for a second, path-tracking pass to word the error
/// (tracking every parse costs about a sixth of a `tools/call` round trip), and only for
/// params of at most 64 KiB: larger params are told the error without its path, rather
/// than read twice. The error is cut at 200 bytes.
pub fn parse_object<'a, T: Deserialize<'a>>(raw: Option<&'a RawValue>) -> Result<T, String> {
    let text = raw.map_or("{}", RawValue::get);
    if !text.starts_with('{') {
        return Err("must be a JSON object".to_owned());
    }
    let mut de = serde_json::Deserializer::from_str(text);
    T::deserialize(Bounded(&mut de))
        .and_then(|value| de.end().map(|()| value))
        .map_err(|error| describe_parse_error::<T>(text, &error))
}

/// Params this large get their error without a second pass for its path.
const DESCRIBED_WITH_PATH_BYTES: usize = 64 << 10;

/// The longest parse error told, in bytes.
const MAX_PARSE_ERROR_BYTES: usize = 200;

#[cold]
fn describe_parse_error<'a, T: Deserialize<'a>>(
    text: &'a str,
    first: &serde_json::Error,
) -> String {
    let (path, detail) = if text.len() <= DESCRIBED_WITH_PATH_BYTES {
        let mut de = serde_json::Deserializer::from_str(text);
        let Err(e) = serde_path_to_error::deserialize::<_, T>(Bounded(&mut de)) else {
            return "invalid params".to_owned();
        };
        (e.path().to_string(), e.into_inner().to_string())
    } else {
        (".".to_owned(), first.to_string())
    };
    let detail = detail
        .rfind(" at line ")
        .map_or(detail.as_str(), |i| &detail[..i]);
    let described = if path == "." {
        detail.to_owned()
    } else {
        format!("{path}: {detail}")
    };
    super::clipped(&described, MAX_PARSE_ERROR_BYTES).into_owned()
}

/// RFC 5424 severities used by MCP logging, least severe first so that `Ord` filters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Detailed information for debugging.
    Debug,
    /// Normal operation.
    Info,
    /// Normal but significant.
    Notice,
    /// Something may go wrong.
    Warning,
    /// Something failed.
    Error,
    /// A component failed.
    Critical,
    /// Action is needed at once.
    Alert,
    /// The system is unusable.
    Emergency,
}

impl LogLevel {
    /// The level named `text` (`debug`, `info`, …), if it is one.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "debug" => Self::Debug,
            "info" => Self::Info,
            "notice" => Self::Notice,
            "warning" => Self::Warning,
            "error" => Self::Error,
            "critical" => Self::Critical,
            "alert" => Self::Alert,
            "emergency" => Self::Emergency,
            _ => return None,
        })
    }
}

/// A progress token exactly as the client sent it (a string or a number).
#[derive(Debug, Clone)]
pub struct ProgressToken(Box<RawValue>);

impl ProgressToken {
    pub fn from_raw(raw: &RawValue) -> Option<Self> {
        RequestId::is_valid(raw).then(|| Self(raw.to_owned()))
    }

    pub fn as_raw(&self) -> &RawValue {
        &self.0
    }
}

/// The `_meta` key of a 2026-07-28 request's protocol version: its presence makes the
/// request one of that revision (`RequestMeta::protocol_version` reads it).
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";

/// `_meta` of a request: the keys the server reads, raw. Serialized (the keys present) for
/// the access log of a `tools/call`, whose params are not kept raw.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestMeta<'a> {
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub progress_token: Option<&'a RawValue>,
    /// W3C trace context of this request.
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<&'a RawValue>,
    /// 2026-07-28: the request's protocol version (its presence makes it a 2026 request).
    #[serde(
        borrow,
        default,
        rename = "io.modelcontextprotocol/protocolVersion",
        skip_serializing_if = "Option::is_none"
    )]
    pub protocol_version: Option<&'a RawValue>,
    /// 2026-07-28: the client's capabilities, for this request.
    #[serde(
        borrow,
        default,
        rename = "io.modelcontextprotocol/clientCapabilities",
        skip_serializing_if = "Option::is_none"
    )]
    pub client_capabilities: Option<&'a RawValue>,
    /// 2026-07-28: the client's name and version.
    #[serde(
        borrow,
        default,
        rename = "io.modelcontextprotocol/clientInfo",
        skip_serializing_if = "Option::is_none"
    )]
    pub client_info: Option<&'a RawValue>,
    /// 2026-07-28: the least severe level of log lines the request wants.
    #[serde(
        borrow,
        default,
        rename = "io.modelcontextprotocol/logLevel",
        skip_serializing_if = "Option::is_none"
    )]
    pub log_level: Option<&'a RawValue>,
    /// The client's key for de-duplicating retries of this request (`tools/call`).
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<&'a RawValue>,
}

impl RequestMeta<'_> {
    /// The trace id of this request's `traceparent`, if it has a valid one.
    pub fn trace_id(&self) -> Option<Box<str>> {
        let raw = self.traceparent?.get();
        let text: Cow<'_, str> = if raw.contains('\\') {
            Cow::Owned(serde_json::from_str(raw).ok()?)
        } else {
            Cow::Borrowed(raw.strip_prefix('"')?.strip_suffix('"')?)
        };
        crate::protocol::traceparent::trace_id(&text).map(Box::from)
    }
}

/// What the server reads of params the JSON-RPC decoder kept raw (every method but an
/// eagerly parsed `tools/call`) before the method's handler parses them: their `_meta`
/// (the era, the access line's trace id), the member naming what the request acts on (a
/// 2026-07-28 request's `Mcp-Name` header repeats it) and a `tools/call`'s arguments (its
/// `Mcp-Param-*` headers). Read once, by the first that needs it, and handed on.
///
/// Every member but `_meta` is kept raw: a member of the wrong type is its handler's to
/// answer, and must not hide the `_meta` beside it.
#[derive(Debug, Deserialize)]
pub struct RawParamsHead<'a> {
    /// The `_meta` member, if any.
    #[serde(borrow, default, rename = "_meta")]
    pub meta: Option<RequestMeta<'a>>,
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    uri: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "taskId")]
    task_id: Option<&'a RawValue>,
    /// `tools/call`'s arguments, raw.
    #[serde(borrow, default)]
    pub arguments: Option<&'a RawValue>,
}

impl<'a> RawParamsHead<'a> {
    /// The head of raw params (`None`: no params, or params that are not an object).
    ///
    /// # Errors
    /// An object whose head does not read: a member read here named twice (a `_meta` key
    /// too), or a `_meta` that is not an object. Nothing of it can be believed, the era
    /// its `_meta` names least of all.
    pub fn read(raw: Option<&'a RawValue>) -> Result<Option<Self>, serde_json::Error> {
        match raw.filter(|raw| raw.get().starts_with('{')) {
            Some(raw) => serde_json::from_str(raw.get()).map(Some),
            None => Ok(None),
        }
    }

    /// What a request of `method` acts on ([`Method::target`]), if that member is a string.
    pub fn target(&self, method: Method) -> Option<Cow<'a, str>> {
        let raw = match method.target()? {
            Target::Name => self.name,
            Target::Uri => self.uri,
            Target::TaskId => self.task_id,
        }?;
        serde_json::from_str(raw.get()).ok()
    }
}

/// `tools/call` params. They are the hot path's, so the JSON-RPC decoder parses them in the
/// envelope's own pass (see `jsonrpc::EagerParams`).
#[derive(Debug, Deserialize)]
pub struct CallToolParams<'a> {
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    #[serde(borrow, default)]
    pub arguments: Option<&'a RawValue>,
    /// Boxed: these params travel inside the decoded message, which is moved several times
    /// on its way to the session, and most calls carry no `_meta` (ten slots of 16 bytes).
    #[serde(borrow, default, rename = "_meta")]
    pub meta: Option<Box<RequestMeta<'a>>>,
    /// 2026-07-28: the client's answers to an earlier round's asks.
    #[serde(borrow, default, rename = "inputResponses")]
    pub input_responses: Option<&'a RawValue>,
    /// 2026-07-28: the state an earlier round handed out.
    #[serde(borrow, default, rename = "requestState")]
    pub request_state: Option<Cow<'a, str>>,
}

impl<'a> crate::protocol::jsonrpc::EagerParams<'a> for CallToolParams<'a> {
    const METHOD: &'static str = "tools/call";
}

/// Params of the list methods: only a cursor, which this server never issues.
#[derive(Debug, Default, Deserialize)]
pub struct ListParams<'a> {
    #[serde(borrow, default)]
    pub cursor: Option<Cow<'a, str>>,
}

/// `resources/read` params.
#[derive(Debug, Deserialize)]
pub struct ReadResourceParams<'a> {
    #[serde(borrow)]
    pub uri: Cow<'a, str>,
    #[serde(borrow, default, rename = "_meta")]
    pub meta: Option<RequestMeta<'a>>,
    /// 2026-07-28: the client's answers to an earlier round's asks.
    #[serde(borrow, default, rename = "inputResponses")]
    pub input_responses: Option<&'a RawValue>,
    /// 2026-07-28: the state an earlier round handed out.
    #[serde(borrow, default, rename = "requestState")]
    pub request_state: Option<Cow<'a, str>>,
}

/// `resources/subscribe` and `resources/unsubscribe` params.
#[derive(Debug, Deserialize)]
pub struct SubscribeParams<'a> {
    #[serde(borrow)]
    pub uri: Cow<'a, str>,
}

/// `prompts/get` params.
#[derive(Debug, Deserialize)]
pub struct GetPromptParams<'a> {
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    #[serde(default)]
    pub arguments: std::collections::HashMap<String, String>,
    #[serde(borrow, default, rename = "_meta")]
    pub meta: Option<RequestMeta<'a>>,
    /// 2026-07-28: the client's answers to an earlier round's asks.
    #[serde(borrow, default, rename = "inputResponses")]
    pub input_responses: Option<&'a RawValue>,
    /// 2026-07-28: the state an earlier round handed out.
    #[serde(borrow, default, rename = "requestState")]
    pub request_state: Option<Cow<'a, str>>,
}

#[derive(Debug, Deserialize)]
pub struct SetLevelParams<'a> {
    #[serde(borrow)]
    pub level: Cow<'a, str>,
}

/// `completion/complete` params.
#[derive(Debug, Deserialize)]
pub struct CompleteParams {
    #[serde(rename = "ref")]
    pub reference: CompleteRef,
    pub argument: CompleteArgument,
    /// Arguments already chosen (2025-06-18 on).
    #[serde(default)]
    pub context: Option<CompleteContext>,
}

/// `completion/complete` params' `context`.
#[derive(Debug, Default, Deserialize)]
pub struct CompleteContext {
    #[serde(default)]
    pub arguments: std::collections::HashMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type")]
pub enum CompleteRef {
    #[serde(rename = "ref/prompt")]
    Prompt { name: String },
    #[serde(rename = "ref/resource")]
    Resource { uri: String },
}

#[derive(Debug, Deserialize)]
pub struct CompleteArgument {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelledParams<'a> {
    #[serde(borrow)]
    pub request_id: &'a RawValue,
}

/// `notifications/progress` params, with the token spliced raw.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProgressParams<'a> {
    pub progress_token: &'a RawValue,
    pub progress: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<&'a str>,
}

/// `notifications/message` params.
#[derive(Debug, Serialize)]
pub struct LoggingMessageParams<'a> {
    pub level: LogLevel,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logger: Option<&'a str>,
    /// Written already, by the tool's context.
    pub data: &'a RawValue,
}

#[cfg(test)]
mod tests {
    use super::CallToolParams;
    use crate::protocol::jsonrpc::{decode, Decoded, Entry, Params, Request};

    /// The hot path's params really are parsed in the envelope's pass: if `CallToolParams`
    /// ever stopped fitting it, every `tools/call` would silently be decoded twice.
    #[test]
    fn tools_call_params_are_parsed_in_the_envelope_pass() {
        let frame = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"},"_meta":{"progressToken":"t"}}}"#;
        match decode::<CallToolParams<'_>>(frame, &crate::protocol::jsonrpc::FrameLimits::new(10)) {
            Decoded::Single(Entry::Request(Request {
                params: Params::Parsed(params),
                ..
            })) => {
                assert_eq!(params.name, "echo");
                assert_eq!(params.arguments.map(|a| a.get()), Some(r#"{"text":"hi"}"#));
                let token = params.meta.and_then(|m| m.progress_token).map(|t| t.get());
                assert_eq!(token, Some(r#""t""#));
            }
            other => panic!("expected a request with parsed params, got {other:?}"),
        }
    }
}
