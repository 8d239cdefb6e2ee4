//! The 2026-07-28 revision from the client's side: the per-request `_meta` a client sends
//! (version, capabilities, identity), and the checks of the results' shape (`resultType`, the
//! server's identity, caching hints, `InputRequiredResult`).

use super::assert_result;
use super::stateless::{CACHE_SCOPE, SERVER_NAME, SERVER_VERSION};
use serde_json::{json, Value};

pub const MODERN: &str = "2026-07-28";
pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

// ---------------------------------------------------------------------------------------
// Requests.

/// The `_meta` of a 2026-07-28 request declaring `capabilities`.
pub fn meta(capabilities: Value) -> Value {
    json!({
        PROTOCOL_VERSION: MODERN,
        CLIENT_CAPABILITIES: capabilities,
        CLIENT_INFO: {"name": "stateless-tests", "version": "1.0.0"},
    })
}

/// `params` (an object) with the `_meta` of a 2026-07-28 request that declares no
/// capabilities.
pub fn stateless(params: Value) -> Value {
    with_meta(params, meta(json!({})))
}

/// `params` (an object) with the `_meta` of a 2026-07-28 request declaring `capabilities`.
pub fn stateless_with(capabilities: Value, params: Value) -> Value {
    with_meta(params, meta(capabilities))
}

/// `params` (an object) with `meta` as its `_meta`.
pub fn with_meta(mut params: Value, meta: Value) -> Value {
    params
        .as_object_mut()
        .expect("params are an object")
        .insert("_meta".into(), meta);
    params
}

/// `params` with one more `_meta` member (the params must have a `_meta` already).
pub fn add_meta(mut params: Value, key: &str, value: Value) -> Value {
    params["_meta"]
        .as_object_mut()
        .expect("params carry _meta")
        .insert(key.into(), value);
    params
}

/// The capabilities a client answering every kind of ask declares.
pub fn all_asks() -> Value {
    json!({"elicitation": {}, "sampling": {}, "roots": {}})
}

pub fn cancelled(id: &Value) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
           "params": {"requestId": id, "reason": "test", "_meta": meta(json!({}))}})
}

/// An answer to an elicitation that accepts with this name.
pub fn accept_name(name: &str) -> Value {
    json!({"action": "accept", "content": {"name": name}})
}

/// The retry of a multi round-trip request: the same params, `inputResponses` and the
/// `requestState` of the round before (when there is one).
pub fn retry(params: &Value, responses: Value, state: Option<&str>) -> Value {
    let mut params = params.clone();
    let object = params.as_object_mut().expect("params are an object");
    object.insert("inputResponses".into(), responses);
    if let Some(state) = state {
        object.insert("requestState".into(), json!(state));
    }
    params
}

/// A notification tagged with the subscription `id` (as a `subscriptions/listen` stream
/// carries it).
pub fn tagged(method: &str, id: &Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": {"_meta": {SUBSCRIPTION_ID: id}}})
}

// ---------------------------------------------------------------------------------------
// Result shapes.

/// Checks the parts every 2026-07-28 result shares: `resultType` and the server's identity
/// in `_meta`; returns the result.
pub fn assert_stateless_result(response: &Value, id: &Value, result_type: &str) -> Value {
    let result = assert_result(response, id);
    assert_eq!(result["resultType"], result_type, "{response}");
    let info = &result["_meta"][SERVER_INFO];
    assert_eq!(info["name"], SERVER_NAME, "{response}");
    assert_eq!(info["version"], SERVER_VERSION, "{response}");
    result
}

/// A complete 2026-07-28 result.
pub fn assert_complete(response: &Value, id: &Value) -> Value {
    assert_stateless_result(response, id, "complete")
}

/// A session-era result: no `resultType`, no server identity in `_meta`, no caching
/// hints.
pub fn assert_session_result(response: &Value, id: &Value) -> Value {
    let result = assert_result(response, id);
    assert!(result.get("resultType").is_none(), "{response}");
    assert!(result["_meta"].get(SERVER_INFO).is_none(), "{response}");
    assert!(result.get("ttlMs").is_none(), "{response}");
    assert!(result.get("cacheScope").is_none(), "{response}");
    result
}

/// The caching hints of a cacheable result (lists, reads): `ttl_ms` and the configured
/// scope.
pub fn assert_cache_hints(result: &Value, ttl_ms: u64) {
    assert_eq!(result["ttlMs"], ttl_ms, "{result}");
    assert_eq!(result["cacheScope"], CACHE_SCOPE, "{result}");
}

/// A result that is not cacheable carries no hints.
pub fn assert_no_cache_hints(result: &Value) {
    assert!(result.get("ttlMs").is_none(), "{result}");
    assert!(result.get("cacheScope").is_none(), "{result}");
}

/// An `InputRequiredResult`: checks its shape and that it asks exactly `keys` (sorted), and
/// returns `(inputRequests, requestState)`.
pub fn assert_input_required(response: &Value, id: &Value, keys: &[&str]) -> (Value, String) {
    let result = assert_stateless_result(response, id, "input_required");
    assert_no_cache_hints(&result);
    let requests = result["inputRequests"].clone();
    let mut asked: Vec<&str> = requests
        .as_object()
        .unwrap_or_else(|| panic!("inputRequests is an object: {response}"))
        .keys()
        .map(String::as_str)
        .collect();
    asked.sort_unstable();
    assert_eq!(asked, keys, "{response}");
    let state = result["requestState"]
        .as_str()
        .unwrap_or_else(|| panic!("requestState is a string: {response}"))
        .to_owned();
    (requests, state)
}
