//! Decoding one text frame: single message or batch (decided by the first byte, before any
//! parse), then one borrowed parse per object and a hand-written classification.
//!
//! Every member is read as raw JSON first and checked by hand, so that a wrong type in one
//! member (say `"method": 1`) still lets us answer with the request's id, and so that
//! `"id": null` (a request, answered with -32600) stays distinct from a missing id (a
//! notification, never answered). serde's untagged enums cannot do either.

use super::RequestId;
use crate::error::Error;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use std::borrow::Cow;

/// A request: it has an id and must be answered exactly once (or not at all if cancelled).
#[derive(Debug)]
pub struct Request<'a> {
    pub id: RequestId,
    pub method: Cow<'a, str>,
    /// Raw params, already checked to be an object or an array.
    pub params: Option<&'a RawValue>,
}

/// A notification: no id, never answered, not even on error.
#[derive(Debug)]
pub struct Notification<'a> {
    pub method: Cow<'a, str>,
    pub params: Option<&'a RawValue>,
}

/// One classified message of a frame.
#[derive(Debug)]
pub enum Entry<'a> {
    Request(Request<'a>),
    Notification(Notification<'a>),
    /// A response from the client to a server→client request. This server sends none, so
    /// the caller logs and drops it.
    Response,
    /// Not a valid JSON-RPC message: answered with `error`, echoing `id` when it was readable
    /// and `null` otherwise.
    Invalid {
        id: Option<RequestId>,
        error: Error,
    },
}

/// What a text frame held.
#[derive(Debug)]
pub enum Decoded<'a> {
    Single(Entry<'a>),
    /// A non-empty array of entries, each classified on its own.
    Batch(Vec<Entry<'a>>),
    /// The frame as a whole is answered by one error object with a null id: unparsable
    /// JSON, an empty batch, or a batch over the length limit.
    Rejected(Error),
}

/// Decodes one frame. `max_batch_len` is checked before any batch entry is parsed.
pub fn decode(text: &str, max_batch_len: usize) -> Decoded<'_> {
    match text
        .trim_start_matches([' ', '\t', '\n', '\r'])
        .as_bytes()
        .first()
    {
        Some(b'{') => Decoded::Single(decode_object(text)),
        Some(b'[') => decode_batch(text, max_batch_len),
        // Valid JSON that is not an object or array (`1`, `"x"`, `null`) is an invalid
        // request; anything else is a parse error.
        _ => match serde_json::from_str::<&RawValue>(text) {
            Ok(_) => Decoded::Single(invalid(None, "a message must be a JSON object")),
            Err(_) => Decoded::Rejected(Error::Parse),
        },
    }
}

fn decode_batch(text: &str, max_batch_len: usize) -> Decoded<'_> {
    let items: Vec<&RawValue> = match serde_json::from_str(text) {
        Ok(items) => items,
        Err(_) => return Decoded::Rejected(Error::Parse),
    };
    if items.is_empty() {
        return Decoded::Rejected(Error::InvalidRequest("an empty batch is not a request"));
    }
    if items.len() > max_batch_len {
        return Decoded::Rejected(Error::BatchTooLarge {
            limit: max_batch_len,
            received: items.len(),
        });
    }
    Decoded::Batch(
        items
            .into_iter()
            .map(|item| match item.get().as_bytes().first() {
                Some(b'{') => decode_object(item.get()),
                _ => invalid(None, "a batch entry must be a JSON object"),
            })
            .collect(),
    )
}

/// Every member kept raw; `present` keeps an explicit `null` distinct from a missing member.
#[derive(Deserialize)]
struct RawMessage<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    jsonrpc: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    method: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    params: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    result: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    error: Option<&'a RawValue>,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

fn decode_object(text: &str) -> Entry<'_> {
    let msg: RawMessage<'_> = match serde_json::from_str(text) {
        Ok(msg) => msg,
        Err(e) if e.is_syntax() || e.is_eof() => {
            // Only reachable for a single message (a batch was parsed whole already).
            return Entry::Invalid {
                id: None,
                error: Error::Parse,
            };
        }
        // Valid JSON of the wrong shape, e.g. a duplicated member.
        Err(_) => return invalid(None, "malformed message object"),
    };
    let id = msg.id.map(RequestId::from_raw);
    // The id to echo in an error: readable only if it is a string or number.
    let echo_id = id.clone().flatten();

    if msg.jsonrpc.and_then(json_str).as_deref() != Some("2.0") {
        return invalid(echo_id, "\"jsonrpc\" must be exactly \"2.0\"");
    }
    let Some(method) = msg.method else {
        return match (echo_id, msg.result.is_some(), msg.error.is_some()) {
            (Some(_), true, false) | (Some(_), false, true) => Entry::Response,
            (echo_id, _, _) => invalid(echo_id, "a request needs a \"method\""),
        };
    };
    let Some(method) = json_str(method) else {
        return invalid(echo_id, "\"method\" must be a string");
    };
    if msg.result.is_some() || msg.error.is_some() {
        return invalid(echo_id, "a request must not carry \"result\" or \"error\"");
    }
    if let Some(params) = msg.params {
        if !matches!(params.get().as_bytes().first(), Some(b'{' | b'[')) {
            return invalid(echo_id, "\"params\" must be an object or an array");
        }
    }
    match id {
        None => Entry::Notification(Notification {
            method,
            params: msg.params,
        }),
        Some(Some(id)) => Entry::Request(Request {
            id,
            method,
            params: msg.params,
        }),
        Some(None) => invalid(
            None,
            "\"id\" must be a string or a number (MCP forbids null)",
        ),
    }
}

fn invalid(id: Option<RequestId>, reason: &'static str) -> Entry<'static> {
    Entry::Invalid {
        id,
        error: Error::InvalidRequest(reason),
    }
}

/// Reads a raw JSON value as a string, borrowing it when it holds no escapes.
fn json_str(raw: &RawValue) -> Option<Cow<'_, str>> {
    let text = raw.get();
    if !text.starts_with('"') {
        return None;
    }
    if !text.contains('\\') {
        return Some(Cow::Borrowed(&text[1..text.len() - 1]));
    }
    serde_json::from_str::<String>(text).ok().map(Cow::Owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn single(text: &str) -> Entry<'_> {
        match decode(text, 10) {
            Decoded::Single(entry) => entry,
            other => panic!("expected a single entry, got {other:?}"),
        }
    }

    fn invalid_code(entry: &Entry<'_>) -> Option<(Option<String>, i32)> {
        match entry {
            Entry::Invalid { id, error } => {
                Some((id.as_ref().map(|i| i.to_string()), error.code().0))
            }
            _ => None,
        }
    }

    #[test]
    fn request_notification_and_response_are_told_apart() {
        assert!(matches!(
            single(r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#),
            Entry::Request(Request { ref id, ref method, params: None }) if id.as_json() == "7" && method == "ping"
        ));
        assert!(matches!(
            single(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Entry::Notification(_)
        ));
        assert!(matches!(
            single(r#"{"jsonrpc":"2.0","id":"s","result":{}}"#),
            Entry::Response
        ));
        assert!(matches!(
            single(r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}}"#),
            Entry::Response
        ));
    }

    #[test]
    fn escaped_method_names_are_unescaped() {
        match single(r#"{"jsonrpc":"2.0","id":1,"method":"tools\/list"}"#) {
            Entry::Request(req) => assert_eq!(req.method, "tools/list"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn null_id_is_an_invalid_request_not_a_notification() {
        let entry = single(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#);
        assert_eq!(invalid_code(&entry), Some((None, -32600)));
    }

    #[test]
    fn envelope_errors_keep_a_readable_id() {
        for text in [
            r#"{"jsonrpc":"1.0","id":5,"method":"ping"}"#,
            r#"{"id":5,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":1}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"ping","params":"x"}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"ping","params":null}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"ping","result":{}}"#,
            r#"{"jsonrpc":"2.0","id":5}"#,
            r#"{"jsonrpc":"2.0","id":5,"result":{},"error":{}}"#,
        ] {
            assert_eq!(
                invalid_code(&single(text)),
                Some((Some("5".into()), -32600)),
                "{text}"
            );
        }
        // An unreadable id is answered with null.
        let entry = single(r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#);
        assert_eq!(invalid_code(&entry), Some((None, -32600)));
    }

    #[test]
    fn frame_level_rejections() {
        assert!(
            matches!(decode("{not json", 10), Decoded::Single(Entry::Invalid { ref error, .. }) if error.code().0 == -32700)
        );
        assert!(matches!(decode("[1,", 10), Decoded::Rejected(ref e) if e.code().0 == -32700));
        assert!(matches!(decode("", 10), Decoded::Rejected(ref e) if e.code().0 == -32700));
        assert!(matches!(decode(" [ ] ", 10), Decoded::Rejected(ref e) if e.code().0 == -32600));
        assert!(matches!(decode("[1,2,3]", 2), Decoded::Rejected(ref e) if e.code().0 == -32010));
        assert_eq!(invalid_code(&single("42")), Some((None, -32600)));
    }

    #[test]
    fn batch_entries_are_classified_one_by_one() {
        let Decoded::Batch(entries) = decode(
            r#"[1, {"jsonrpc":"2.0","id":1,"method":"ping"}, {"jsonrpc":"2.0","method":"n"}]"#,
            10,
        ) else {
            panic!("expected a batch")
        };
        assert_eq!(invalid_code(&entries[0]), Some((None, -32600)));
        assert!(matches!(entries[1], Entry::Request(_)));
        assert!(matches!(entries[2], Entry::Notification(_)));
    }
}
