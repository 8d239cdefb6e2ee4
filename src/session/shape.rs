//! The 2026-07-28 requests and answers of one server: what a request's `_meta` establishes
//! for it ([`StatelessRequest`]), what every result shares, built once ([`StatelessShape`]: the
//! server's identity as a result `_meta`, the key that signs request states, the defaults of
//! per-request `_meta`), and the writers of its answers.

use crate::context::SessionInfo;
use crate::model::Implementation;
use crate::protocol::jsonrpc::RequestId;
use crate::protocol::mcp::ProtocolVersion;
use crate::protocol::mcp::{Error, LogLevel};
use serde_json::{json, Map, Value};
use std::borrow::Cow;
use std::rc::Rc;
use std::sync::Arc;

/// The `_meta` key of the server's identity in every 2026-07-28 result.
pub const SERVER_INFO_META: &str = "io.modelcontextprotocol/serverInfo";

/// What 2026-07-28 results of one server share: its identity for result `_meta`, the key
/// that signs request states, and the defaults of per-request `_meta`.
pub struct StatelessShape {
    /// `{"io.modelcontextprotocol/serverInfo":{…}}`: the `_meta` of a result that has none
    /// of its own, written once (a `format!` per result was a tenth of a request's cost).
    pub(super) server_info_meta: String,
    /// The server's `Implementation` as JSON, for merging into a result's own `_meta`.
    pub(super) server_info: Value,
    /// Signs and checks `requestState`.
    pub state_key: crate::protocol::mrtr::StateKey,
    /// Shared by requests that declare no capabilities (`{}`).
    pub no_capabilities: Arc<Value>,
    /// Shared by requests that name no client.
    pub unknown_client: Arc<Implementation>,
}

impl StatelessShape {
    /// The shape for a server presenting itself as `server_info`.
    pub fn new(server_info: &Implementation, state_key: crate::protocol::mrtr::StateKey) -> Self {
        let info = serde_json::to_value(crate::model::ForVersion(
            server_info,
            ProtocolVersion::V2026_07_28,
        ))
        .unwrap_or_default();
        Self {
            server_info_meta: format!("{{{}:{}}}", json!(SERVER_INFO_META), info),
            server_info: info,
            state_key,
            no_capabilities: Arc::new(Value::Object(Map::new())),
            unknown_client: Arc::new(Implementation::new("unknown", "unknown")),
        }
    }
}

/// What a 2026-07-28 request's `_meta` establishes for it.
#[derive(Debug, Clone)]
pub(crate) struct StatelessRequest {
    /// Its version, capabilities and client, as a session's would be (shared with the
    /// session's previous 2026-07-28 request when they are the same).
    pub info: Rc<SessionInfo>,
    /// The least severe log level it wants `notifications/message` for; none: no logs.
    pub log_level: Option<LogLevel>,
}

/// A 2026-07-28 result: `body` (a JSON object) with `resultType`, `_meta` (the server's
/// identity, merged with `user_meta`) and `extra` members added. `body` must not hold a
/// `_meta` of its own: it goes in `user_meta`.
pub(crate) fn stateless_result(
    shape: &StatelessShape,
    body: &str,
    extra: &str,
    user_meta: Option<&Value>,
    result_type: &str,
) -> String {
    let mut out = String::with_capacity(result_len_hint(shape, body, extra));
    push_stateless_result(&mut out, shape, body, extra, user_meta, result_type);
    out
}

/// The answer to `id` of `result` as a 2026-07-28 result of `result_type` (`complete`,
/// `task`; its `_meta`, if any, goes in `user_meta`: see [`stateless_result`]), serialized
/// straight into the frame after the members this revision adds. `size_hint` is the
/// expected length of `result`.
pub(crate) fn stateless_answer(
    shape: &StatelessShape,
    id: &RequestId,
    result_type: &str,
    result: &impl serde::Serialize,
    extra: &str,
    user_meta: Option<&Value>,
    size_hint: usize,
) -> Result<String, Error> {
    let meta = result_meta(shape, user_meta);
    crate::protocol::jsonrpc::encode_result_members(
        id,
        &[r#""resultType":""#, result_type, r#"","_meta":"#, &meta],
        result,
        extra,
        size_hint,
    )
    .map_err(|_| Error::Internal)
}

/// The `_meta` of a 2026-07-28 result: the server's identity, merged into `user_meta` when
/// the result has one of its own.
fn result_meta<'a>(shape: &'a StatelessShape, user_meta: Option<&Value>) -> Cow<'a, str> {
    match user_meta {
        Some(Value::Object(user)) => {
            let mut user = user.clone();
            user.insert(SERVER_INFO_META.to_owned(), shape.server_info.clone());
            Cow::Owned(Value::Object(user).to_string())
        }
        _ => Cow::Borrowed(&shape.server_info_meta),
    }
}

/// About how long a 2026-07-28 result is: `body`, `extra`, the server's `_meta` and the
/// `resultType` member.
fn result_len_hint(shape: &StatelessShape, body: &str, extra: &str) -> usize {
    body.len() + extra.len() + shape.server_info_meta.len() + 48
}

/// [`stateless_result`], written at the end of `out`.
fn push_stateless_result(
    out: &mut String,
    shape: &StatelessShape,
    body: &str,
    extra: &str,
    user_meta: Option<&Value>,
    result_type: &str,
) {
    let inner = body.trim_ascii();
    let inner = inner
        .strip_prefix('{')
        .and_then(|b| b.strip_suffix('}'))
        .unwrap_or("")
        .trim_ascii();
    out.push_str(r#"{"resultType":""#);
    out.push_str(result_type);
    out.push_str(r#"","_meta":"#);
    out.push_str(&result_meta(shape, user_meta));
    if !inner.is_empty() {
        out.push(',');
        out.push_str(inner);
    }
    out.push_str(extra);
    out.push('}');
}
