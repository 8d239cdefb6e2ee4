//! Encoding outgoing messages as text, with ids spliced in as the raw bytes received.
//!
//! Responses are built by string concatenation around pre-serialized parts: the id is never
//! re-parsed, and a result is serialized exactly once.

use super::{ErrorObject, RequestId};
use serde::Serialize;

const NULL_ID: &str = "null";

/// `{"jsonrpc":"2.0","id":<id>,"result":<result>}` from an already-serialized result.
pub fn encode_result(id: &RequestId, result_json: &str) -> String {
    encode_result_by(id, result_json.len(), |out| out.push_str(result_json))
}

/// `{"jsonrpc":"2.0","id":<id>,"result":<result>}`, with the result written into the frame's
/// own buffer by `write` (which must write one JSON value): no result string to copy in.
/// `size_hint` is the result's expected length.
fn encode_result_by(id: &RequestId, size_hint: usize, write: impl FnOnce(&mut String)) -> String {
    let mut out = String::with_capacity(36 + id.as_json().len() + size_hint);
    out.push_str(r#"{"jsonrpc":"2.0","id":"#);
    out.push_str(id.as_json());
    out.push_str(r#","result":"#);
    write(&mut out);
    out.push('}');
    out
}

/// `{"jsonrpc":"2.0","id":<id>,"result":<result>}`, serializing `result` straight into the
/// frame: one buffer, sized up front by `size_hint` (the expected result length), so a large
/// result is neither copied again nor grown by reallocation.
pub fn encode_result_with(
    id: &RequestId,
    result: &impl Serialize,
    size_hint: usize,
) -> Result<String, serde_json::Error> {
    // The head is written here as in `encode_result_members`, not by a helper both share:
    // with one, this function (every session tool result) was no longer inlined into the
    // worker's closure, +70 instructions per request (callgrind).
    let mut out = Vec::with_capacity(36 + id.as_json().len() + size_hint);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    out.extend_from_slice(id.as_json().as_bytes());
    out.extend_from_slice(br#","result":"#);
    serde_json::to_writer(&mut out, result)?;
    out.push(b'}');
    // serde_json writes UTF-8 only; the check is a fast pass kept for safety.
    String::from_utf8(out).map_err(serde::ser::Error::custom)
}

/// `{"jsonrpc":"2.0","id":<id>,"result":{<head>,<result's members><tail>}}`: a result object
/// that opens with members of the caller's (`head`, written as is: members without braces
/// or trailing comma, or nothing), goes on with the members of `result` (which must
/// serialize as an object), serialized straight into the frame, and ends with `tail` (as is,
/// empty or starting with a comma). `size_hint` is the expected length of `result`.
pub fn encode_result_members(
    id: &RequestId,
    head: &[&str],
    result: &impl Serialize,
    tail: &str,
    size_hint: usize,
) -> Result<String, serde_json::Error> {
    let head_len: usize = head.iter().map(|part| part.len()).sum();
    let mut out = Vec::with_capacity(40 + id.as_json().len() + head_len + size_hint + tail.len());
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    out.extend_from_slice(id.as_json().as_bytes());
    out.extend_from_slice(br#","result":{"#);
    for part in head {
        out.extend_from_slice(part.as_bytes());
    }
    let start = out.len();
    serde_json::to_writer(&mut out, result)?;
    // The result's braces go; its members follow the head's.
    match &out[start..] {
        b"{}" => out.truncate(start),
        [b'{', .., b'}'] if head_len == 0 => {
            out.remove(start);
            out.pop();
        }
        [b'{', .., b'}'] => {
            out[start] = b',';
            out.pop();
        }
        _ => return Err(serde::ser::Error::custom("a result that is not an object")),
    }
    out.extend_from_slice(tail.as_bytes());
    out.extend_from_slice(b"}}");
    // serde_json writes UTF-8 only, and so do the callers' parts; the check is a fast pass
    // kept for safety.
    String::from_utf8(out).map_err(serde::ser::Error::custom)
}

/// The result JSON of a response frame made by [`encode_result`] or [`encode_result_with`]
/// for `id`, so that it can be sent again for another id; `None` for any other frame.
pub fn result_of<'a>(frame: &'a str, id: &RequestId) -> Option<&'a str> {
    frame
        .strip_prefix(r#"{"jsonrpc":"2.0","id":"#)?
        .strip_prefix(id.as_json())?
        .strip_prefix(r#","result":"#)?
        .strip_suffix('}')
}

/// `{"jsonrpc":"2.0","id":<id or null>,"error":{...}}`.
pub fn encode_error(id: Option<&RequestId>, error: &ErrorObject) -> String {
    let id = id.map_or(NULL_ID, RequestId::as_json);
    // An ErrorObject holds only strings, an integer and already-valid raw JSON, so
    // serialization cannot fail; the fallback keeps the wire valid regardless.
    let error_json = serde_json::to_string(error)
        .unwrap_or_else(|_| r#"{"code":-32603,"message":"Internal error"}"#.to_owned());
    let mut out = String::with_capacity(36 + id.len() + error_json.len());
    out.push_str(r#"{"jsonrpc":"2.0","id":"#);
    out.push_str(id);
    out.push_str(r#","error":"#);
    out.push_str(&error_json);
    out.push('}');
    out
}

/// `{"jsonrpc":"2.0","method":<method>,"params":<params>}`.
pub fn encode_notification(method: &str, params: &impl Serialize) -> String {
    #[derive(Serialize)]
    struct Notification<'a, P> {
        jsonrpc: &'static str,
        method: &'a str,
        params: &'a P,
    }
    serde_json::to_string(&Notification {
        jsonrpc: "2.0",
        method,
        params,
    })
    .unwrap_or_default()
}

/// Joins encoded responses into one batch array. The caller sends nothing when `parts` is
/// empty (a batch of notifications gets no frame at all).
pub fn encode_batch(parts: &[String]) -> String {
    let len = parts.iter().map(|p| p.len() + 1).sum::<usize>() + 1;
    let mut out = String::with_capacity(len);
    out.push('[');
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(part);
    }
    out.push(']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::value::RawValue;

    fn id(text: &str) -> RequestId {
        let raw = RawValue::from_string(text.to_owned()).expect("json");
        RequestId::from_raw(&raw).expect("id")
    }

    #[test]
    fn members_of_a_result_follow_the_head_and_precede_the_tail() {
        let result = serde_json::json!({"content": [1, 2], "isError": false});
        let frame = encode_result_members(
            &id("7"),
            &[r#""kind":"x","#, r#""n":1"#],
            &result,
            r#","t":2"#,
            8,
        )
        .expect("an object");
        let parsed: serde_json::Value = serde_json::from_str(&frame).expect("valid JSON");
        assert_eq!(
            parsed,
            serde_json::json!({"jsonrpc": "2.0", "id": 7, "result":
                {"kind": "x", "n": 1, "content": [1, 2], "isError": false, "t": 2}})
        );
        // An empty result adds nothing, and no comma.
        let empty = serde_json::Map::new();
        assert_eq!(
            encode_result_members(&id(r#""a""#), &[r#""k":0"#], &empty, "", 0).expect("an object"),
            r#"{"jsonrpc":"2.0","id":"a","result":{"k":0}}"#
        );
        // No head: the result's own members alone.
        assert_eq!(
            encode_result_members(&id("1"), &[], &result, "", 0).expect("an object"),
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[1,2],"isError":false}}"#
        );
        assert!(encode_result_members(&id("1"), &[r#""k":0"#], &[1, 2], "", 0).is_err());
    }

    #[test]
    fn result_splices_the_raw_id() {
        assert_eq!(
            encode_result(&id("18446744073709551616"), "{}"),
            r#"{"jsonrpc":"2.0","id":18446744073709551616,"result":{}}"#
        );
    }

    #[test]
    fn result_with_serializes_into_the_frame() {
        let frame =
            encode_result_with(&id(r#""x""#), &serde_json::json!({"a": [1]}), 0).expect("ok");
        assert_eq!(frame, r#"{"jsonrpc":"2.0","id":"x","result":{"a":[1]}}"#);
    }

    #[test]
    fn a_result_is_taken_back_out_of_its_frame() {
        let frame = encode_result(&id(r#""a""#), r#"{"x":[1]}"#);
        assert_eq!(result_of(&frame, &id(r#""a""#)), Some(r#"{"x":[1]}"#));
        assert_eq!(result_of(&frame, &id("1")), None);
        let error = encode_error(
            Some(&id("1")),
            &crate::protocol::jsonrpc::WireError::Parse.to_object(),
        );
        assert_eq!(result_of(&error, &id("1")), None);
    }

    #[test]
    fn error_without_id_uses_null() {
        let text = encode_error(
            None,
            &crate::protocol::jsonrpc::WireError::Parse.to_object(),
        );
        let value: serde_json::Value = serde_json::from_str(&text).expect("valid json");
        assert_eq!(value["id"], serde_json::Value::Null);
        assert_eq!(value["error"]["code"], -32700);
        assert!(value.get("result").is_none());
    }

    #[test]
    fn batch_joins_parts() {
        assert_eq!(encode_batch(&["1".into(), "2".into()]), "[1,2]");
    }
}
