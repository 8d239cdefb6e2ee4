//! Decoding one text frame: single message or batch (decided by the first byte, before any
//! parse), then one borrowed parse per object and a hand-written classification.
//!
//! Every member is read as raw JSON first and checked by hand (`result` and `error` only as
//! present), so that a wrong type in one member (say `"method": 1`) still lets us answer
//! with the request's id, and so that `"id": null` (a request, answered with -32600) stays
//! distinct from a missing id (a notification, never answered). serde's untagged enums
//! cannot do either.
//!
//! One exception to "raw first": the caller may name one method whose params are parsed into
//! its type inside the same pass ([`EagerParams`]), so the hot path reads its frame once
//! instead of twice. Anything that pass cannot take cleanly is decoded again with raw params,
//! so the outcome (and every error) is the same as without it.

use super::WireError as Error;
use super::{FrameLimits, RequestId, MAX_ID_BYTES};
use serde::de::{
    self, Deserialize, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess,
};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

/// Params that the caller wants parsed in the envelope's own pass, for one method. This
/// happens only when `"method"` comes before `"params"` (as clients write it) and the params
/// are an object that parses as `Self`; otherwise they arrive raw, like every other method's.
pub trait EagerParams<'a>: Deserialize<'a> {
    /// The method whose params these are.
    const METHOD: &'static str;
}

/// A request's params: raw (absent, or already checked to be an object or an array), or
/// parsed by [`EagerParams`].
#[derive(Debug)]
pub enum Params<'a, P> {
    Raw(Option<&'a RawValue>),
    Parsed(P),
}

/// A request: it has an id and must be answered exactly once (or not at all if cancelled).
#[derive(Debug)]
pub struct Request<'a, P> {
    pub id: RequestId,
    pub method: Cow<'a, str>,
    pub params: Params<'a, P>,
}

/// A notification: no id, never answered, not even on error.
#[derive(Debug)]
pub struct Notification<'a> {
    pub method: Cow<'a, str>,
    pub params: Option<&'a RawValue>,
}

/// One classified message of a frame.
#[derive(Debug)]
pub enum Entry<'a, P> {
    Request(Request<'a, P>),
    Notification(Notification<'a>),
    /// A response from the client to a request the server sent it: its id and its `result`
    /// (`Ok`) or `error` (`Err`), raw.
    Response {
        id: RequestId,
        outcome: Result<&'a RawValue, &'a RawValue>,
    },
    /// Not a valid JSON-RPC message: answered with `error`, echoing `id` when it was readable
    /// and `null` otherwise.
    Invalid {
        id: Option<RequestId>,
        error: Error,
    },
    /// A notification (or a response) refused by a frame limit, or an error response with
    /// a null id: never answered, as no notification or response is, not even on error.
    Dropped {
        error: Error,
    },
}

/// What a text frame held.
#[derive(Debug)]
pub enum Decoded<'a, P> {
    Single(Entry<'a, P>),
    /// A non-empty array of entries, each classified on its own.
    Batch(Vec<Entry<'a, P>>),
    /// The frame as a whole is answered by one error object with a null id: unparsable
    /// JSON, an empty batch, or a batch over the length limit.
    Rejected(Error),
}

/// Decodes one frame. The frame is first measured against the shape limits of `limits` (see
/// [`FrameLimits`]); one that exceeds them is not parsed further than its envelope, so a
/// request is answered under its own id. A batch is counted while it is parsed, and refused
/// once it holds more than the batch limit (its entries are then not kept). The server itself
/// decodes with [`decode_with`] (which may leave params raw); this is the tests' entry.
#[cfg(any(test, feature = "testing"))]
pub fn decode<'a, P: EagerParams<'a>>(text: &'a str, limits: &FrameLimits) -> Decoded<'a, P> {
    decode_with(text, limits, true)
}

/// Decodes one frame as `decode` (the tests' entry, with `eager: true`) does; `eager: false`
/// keeps every method's params raw (for a caller that needs the params' exact text, such as
/// a signature check).
pub fn decode_with<'a, P: EagerParams<'a>>(
    text: &'a str,
    limits: &FrameLimits,
    eager: bool,
) -> Decoded<'a, P> {
    let first = text
        .trim_start_matches([' ', '\t', '\n', '\r'])
        .as_bytes()
        .first();
    if let Err(exceeded) = limits.check(text) {
        return refuse(text, first, Error::LimitExceeded(exceeded));
    }
    match first {
        Some(b'{') => Decoded::Single(decode_object(text, eager)),
        Some(b'[') => decode_batch(text, limits.batch_len(), eager),
        // Valid JSON that is not an object or array (`1`, `"x"`, `null`) is an invalid
        // request; anything else is a parse error.
        _ => match serde_json::from_str::<&RawValue>(text) {
            Ok(_) => Decoded::Single(invalid(None, "a message must be a JSON object")),
            Err(_) => Decoded::Rejected(Error::Parse),
        },
    }
}

/// A frame over a shape limit: a single request is answered under its id (its envelope is
/// read, its params kept raw), a single notification or response is dropped, anything else
/// (a batch, or no readable envelope) is refused as a whole.
fn refuse<'a, P: EagerParams<'a>>(
    text: &'a str,
    first: Option<&u8>,
    error: Error,
) -> Decoded<'a, P> {
    if first != Some(&b'{') {
        return Decoded::Rejected(error);
    }
    let Ok(envelope) = parse_envelope::<P>(text, false) else {
        return Decoded::Rejected(error);
    };
    Decoded::Single(match classify(envelope) {
        Entry::Request(request) => Entry::Invalid {
            id: Some(request.id),
            error,
        },
        Entry::Invalid { id, .. } => Entry::Invalid { id, error },
        Entry::Notification(_) | Entry::Response { .. } | Entry::Dropped { .. } => {
            Entry::Dropped { error }
        }
    })
}

fn decode_batch<'a, P: EagerParams<'a>>(
    text: &'a str,
    max_batch_len: usize,
    eager: bool,
) -> Decoded<'a, P> {
    let mut de = serde_json::Deserializer::from_str(text);
    let counted = de
        .deserialize_seq(BatchSeed { max_batch_len })
        .and_then(|counted| de.end().map(|()| counted));
    let items = match counted {
        Ok(Ok(items)) => items,
        Ok(Err(received)) => {
            return Decoded::Rejected(Error::BatchTooLarge {
                limit: max_batch_len,
                received,
            })
        }
        Err(_) => return Decoded::Rejected(Error::Parse),
    };
    if items.is_empty() {
        return Decoded::Rejected(Error::InvalidRequest("an empty batch is not a request"));
    }
    Decoded::Batch(
        items
            .into_iter()
            .map(|item| match item.get().as_bytes().first() {
                Some(b'{') => decode_object(item.get(), eager),
                _ => invalid(None, "a batch entry must be a JSON object"),
            })
            .collect(),
    )
}

/// Reads a batch's array, keeping at most `max_batch_len` entries (raw): past that, the rest
/// is only counted, so a frame of a million entries costs no more memory than one of
/// `max_batch_len + 1`. The count is the `Err` of the value.
struct BatchSeed {
    max_batch_len: usize,
}

impl<'de> de::Visitor<'de> for BatchSeed {
    type Value = Result<Vec<&'de RawValue>, usize>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a batch array")
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<Self::Value, S::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<&RawValue>()? {
            if items.len() == self.max_batch_len {
                let mut received = items.len() + 1;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    received += 1;
                }
                return Ok(Err(received));
            }
            items.push(item);
        }
        Ok(Ok(items))
    }
}

/// The members of a message object, each `Some` when present (an explicit `null` included).
struct Envelope<'a, P> {
    jsonrpc: Option<&'a RawValue>,
    id: Option<&'a RawValue>,
    method: Option<&'a RawValue>,
    params: Params<'a, P>,
    result: Option<&'a RawValue>,
    error: Option<&'a RawValue>,
}

/// Parses an [`Envelope`]; `eager` says whether [`EagerParams`] may be tried.
struct EnvelopeSeed<P> {
    eager: bool,
    params: PhantomData<P>,
}

impl<'de, P: EagerParams<'de>> DeserializeSeed<'de> for EnvelopeSeed<P> {
    type Value = Envelope<'de, P>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, P: EagerParams<'de>> de::Visitor<'de> for EnvelopeSeed<P> {
    type Value = Envelope<'de, P>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON-RPC message object")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
        let mut envelope = Envelope {
            jsonrpc: None,
            id: None,
            method: None,
            params: Params::Raw(None),
            result: None,
            error: None,
        };
        while let Some(member) = map.next_key::<Member>()? {
            match member {
                Member::Jsonrpc => fill(&mut envelope.jsonrpc, &mut map)?,
                Member::Id => fill(&mut envelope.id, &mut map)?,
                Member::Method => fill(&mut envelope.method, &mut map)?,
                Member::Result => fill(&mut envelope.result, &mut map)?,
                Member::Error => fill(&mut envelope.error, &mut map)?,
                Member::Params => {
                    // A present `params` is never `Raw(None)` (`null` is kept as raw text).
                    if !matches!(envelope.params, Params::Raw(None)) {
                        return Err(duplicate_member());
                    }
                    let eager = self.eager
                        && envelope.method.and_then(json_str).as_deref() == Some(P::METHOD);
                    envelope.params = if eager {
                        Params::Parsed(map.next_value_seed(ObjectOnly(PhantomData))?)
                    } else {
                        Params::Raw(Some(map.next_value()?))
                    };
                }
                Member::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(envelope)
    }
}

/// Reads a member's value into its slot; a member given twice makes the object malformed.
fn fill<'de, T: Deserialize<'de>, M: MapAccess<'de>>(
    slot: &mut Option<T>,
    map: &mut M,
) -> Result<(), M::Error> {
    if slot.is_some() {
        return Err(duplicate_member());
    }
    *slot = Some(map.next_value()?);
    Ok(())
}

fn duplicate_member<E: de::Error>() -> E {
    E::custom("duplicate member")
}

/// A member name of the envelope; unknown members are ignored.
#[derive(serde::Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum Member {
    Jsonrpc,
    Id,
    Method,
    Params,
    Result,
    Error,
    #[serde(other)]
    Other,
}

/// Deserializes `P` from a JSON object only: a derived struct would also accept an array.
struct ObjectOnly<P>(PhantomData<P>);

impl<'de, P: Deserialize<'de>> DeserializeSeed<'de> for ObjectOnly<P> {
    type Value = P;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<P, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, P: Deserialize<'de>> de::Visitor<'de> for ObjectOnly<P> {
    type Value = P;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<P, M::Error> {
        P::deserialize(de::value::MapAccessDeserializer::new(map))
    }
}

fn decode_object<'a, P: EagerParams<'a>>(text: &'a str, eager: bool) -> Entry<'a, P> {
    match parse_envelope(text, eager) {
        // Eager params belong to a request; anything else is decoded again with them raw.
        Ok(envelope) if !matches!(envelope.params, Params::Parsed(_)) || envelope.id.is_some() => {
            return classify(envelope);
        }
        // Cut short: the plain pass would stop at the same place.
        Err(e) if e.is_eof() => return not_json(),
        _ => {}
    }
    // The eager pass failed on the params' shape, or did not fit: a plain pass decides,
    // errors included. Even a syntax error of the eager pass may be the params' alone: a
    // string with a lone surrogate (`"\udc00"`) cannot be read as text, but is JSON, and the
    // request is answered under its id (its params then refused as invalid).
    match parse_envelope(text, false) {
        Ok(envelope) => classify(envelope),
        Err(e) if is_not_json(&e) => not_json(),
        // Valid JSON of the wrong shape, e.g. a duplicated member.
        Err(_) => invalid(None, "malformed message object"),
    }
}

fn is_not_json(e: &serde_json::Error) -> bool {
    e.is_syntax() || e.is_eof()
}

/// Only reachable for a single message (a batch was parsed whole already).
fn not_json<P>() -> Entry<'static, P> {
    Entry::Invalid {
        id: None,
        error: Error::Parse,
    }
}

fn parse_envelope<'a, P: EagerParams<'a>>(
    text: &'a str,
    eager: bool,
) -> Result<Envelope<'a, P>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let envelope = EnvelopeSeed {
        eager,
        params: PhantomData,
    }
    .deserialize(&mut de)?;
    de.end()?;
    Ok(envelope)
}

fn classify<'a, P>(msg: Envelope<'a, P>) -> Entry<'a, P> {
    let id = msg.id.map(RequestId::from_raw);
    // The id to echo in an error: readable only if it is a string or number.
    let echo_id = id.clone().flatten();

    if msg.jsonrpc.and_then(json_str).as_deref() != Some("2.0") {
        // A response by its shape is dropped whatever else is wrong with it (see below).
        if msg.method.is_none() && (msg.result.is_some() || msg.error.is_some()) {
            return Entry::Dropped {
                error: Error::InvalidRequest("a malformed response answers no request"),
            };
        }
        return invalid(echo_id, "\"jsonrpc\" must be exactly \"2.0\"");
    }
    let Some(method) = msg.method else {
        return match (echo_id, msg.result, msg.error) {
            (Some(id), Some(result), None) => Entry::Response {
                id,
                outcome: Ok(result),
            },
            (Some(id), None, Some(error)) => Entry::Response {
                id,
                outcome: Err(error),
            },
            // An error whose id its sender could not tell (JSON-RPC 2.0 §5: `null`): a
            // response to nothing the server can match, never a request to answer.
            (None, None, Some(_)) if msg.id.is_some_and(|id| id.get() == "null") => {
                Entry::Dropped {
                    error: Error::InvalidRequest(
                        "an error response with a null id answers no request",
                    ),
                }
            }
            // A response, by its shape, that is not a valid one (both `result` and `error`,
            // or an id that is no string or number): its id is of the server's numbering,
            // so an error under it would be taken by the client for the answer to its own
            // request of that id. Nothing can be answered.
            (_, result, error) if result.is_some() || error.is_some() => Entry::Dropped {
                error: Error::InvalidRequest("a malformed response answers no request"),
            },
            (echo_id, _, _) => invalid(echo_id, "a request needs a \"method\""),
        };
    };
    let Some(method) = json_str(method) else {
        return invalid(echo_id, "\"method\" must be a string");
    };
    if msg.result.is_some() || msg.error.is_some() {
        return invalid(echo_id, "a request must not carry \"result\" or \"error\"");
    }
    if let Params::Raw(Some(params)) = msg.params {
        if !matches!(params.get().as_bytes().first(), Some(b'{' | b'[')) {
            return invalid(echo_id, "\"params\" must be an object or an array");
        }
    }
    match (id, msg.params) {
        (None, Params::Raw(params)) => Entry::Notification(Notification { method, params }),
        // Not produced: `decode_object` decodes a notification with eager params again, raw.
        (None, Params::Parsed(_)) => invalid(None, "malformed message object"),
        // Not echoed: the answer would copy what the bound is there to refuse.
        (Some(Some(id)), _) if id.as_json().len() > MAX_ID_BYTES => {
            invalid(None, "\"id\" must be at most 1024 bytes")
        }
        (Some(Some(id)), params) => Entry::Request(Request { id, method, params }),
        (Some(None), _) => invalid(
            None,
            "\"id\" must be a string or a number (MCP forbids null)",
        ),
    }
}

fn invalid<P>(id: Option<RequestId>, reason: &'static str) -> Entry<'static, P> {
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
    // A byte loop: the strings read here (`"2.0"`, a method name) are a few bytes long,
    // where `str::contains`'s memchr costs three times as much to set up.
    if !text.bytes().any(|byte| byte == b'\\') {
        return Some(Cow::Borrowed(&text[1..text.len() - 1]));
    }
    serde_json::from_str::<String>(text).ok().map(Cow::Owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    /// Stands for the caller's eager params in these tests: `"call"` with a required `name`.
    #[derive(Debug, Deserialize)]
    struct CallParams<'a> {
        name: &'a str,
    }

    impl<'a> EagerParams<'a> for CallParams<'a> {
        const METHOD: &'static str = "call";
    }

    type TestEntry<'a> = Entry<'a, CallParams<'a>>;

    fn decode(text: &str, max_batch_len: usize) -> Decoded<'_, CallParams<'_>> {
        super::decode(text, &FrameLimits::new(max_batch_len))
    }

    fn single(text: &str) -> TestEntry<'_> {
        match decode(text, 10) {
            Decoded::Single(entry) => entry,
            other => panic!("expected a single entry, got {other:?}"),
        }
    }

    fn invalid_code(entry: &TestEntry<'_>) -> Option<(Option<String>, i32)> {
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
            Entry::Request(Request { ref id, ref method, params: Params::Raw(None) }) if id.as_json() == "7" && method == "ping"
        ));
        assert!(matches!(
            single(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Entry::Notification(_)
        ));
        assert!(matches!(
            single(r#"{"jsonrpc":"2.0","id":"s","result":{}}"#),
            Entry::Response { .. }
        ));
        assert!(matches!(
            single(r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}}"#),
            Entry::Response { .. }
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
    fn a_batch_over_its_limit_is_counted_not_kept() {
        let batch = format!("[{}0]", "0,".repeat(9999));
        assert!(matches!(
            decode(&batch, 100),
            Decoded::Rejected(Error::BatchTooLarge {
                limit: 100,
                received: 10_000
            })
        ));
        // At the limit it is a batch; broken JSON past the limit is still a parse error.
        assert!(matches!(decode("[1,2]", 2), Decoded::Batch(ref e) if e.len() == 2));
        assert!(matches!(
            decode("[1,2,3,", 2),
            Decoded::Rejected(Error::Parse)
        ));
        assert!(matches!(
            decode("[1,2,3] x", 2),
            Decoded::Rejected(Error::Parse)
        ));
    }

    #[test]
    fn a_frame_over_a_shape_limit_is_answered_under_its_id_or_not_at_all() {
        let limits = FrameLimits::new(10).max_depth(3);
        let decode = |text| super::decode::<CallParams<'_>>(text, &limits);
        let deep = r#"{"jsonrpc":"2.0","id":"d","method":"call","params":{"a":[[1]]}}"#;
        match decode(deep) {
            Decoded::Single(Entry::Invalid {
                id: Some(id),
                error: Error::LimitExceeded(exceeded),
            }) => {
                assert_eq!(id.as_json(), r#""d""#);
                assert_eq!(exceeded.kind, super::super::JsonLimit::Depth);
                assert_eq!(exceeded.limit, 3);
            }
            other => panic!("{other:?}"),
        }
        // A notification over the limit is never answered.
        let notification = r#"{"jsonrpc":"2.0","method":"call","params":{"a":[[1]]}}"#;
        assert!(matches!(
            decode(notification),
            Decoded::Single(Entry::Dropped {
                error: Error::LimitExceeded(_)
            })
        ));
        // A batch over it is refused as a whole, as is a frame with no readable envelope.
        for text in [
            r#"[{"jsonrpc":"2.0","id":1,"method":"call","params":{"a":[1]}}]"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"call","params":{"a":[[1]]}"#,
        ] {
            assert!(
                matches!(decode(text), Decoded::Rejected(Error::LimitExceeded(_))),
                "{text}"
            );
        }
        // The same frames within the limit decode as usual.
        let within = FrameLimits::new(10).max_depth(4);
        assert!(matches!(
            super::decode::<CallParams<'_>>(deep, &within),
            Decoded::Single(Entry::Request(_))
        ));
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

    /// The params of a request, as the decoder delivered them: `Ok(name)` when parsed
    /// eagerly, `Err(raw text)` otherwise.
    fn params_of(text: &str) -> Result<String, Option<String>> {
        match single(text) {
            Entry::Request(Request {
                params: Params::Parsed(p),
                ..
            }) => Ok(p.name.to_owned()),
            Entry::Request(Request {
                params: Params::Raw(raw),
                ..
            }) => Err(raw.map(|r| r.get().to_owned())),
            other => panic!("expected a request, got {other:?}"),
        }
    }

    #[test]
    fn eager_params_are_parsed_in_the_envelope_pass_when_method_comes_first() {
        assert_eq!(
            params_of(r#"{"jsonrpc":"2.0","id":1,"method":"call","params":{"name":"n"}}"#),
            Ok("n".into())
        );
        // Escaped member names are still the same members.
        assert_eq!(
            params_of(
                r#"{"jsonrpc":"2.0","id":1,"m\u0065thod":"call","p\u0061rams":{"name":"n"}}"#
            ),
            Ok("n".into())
        );
    }

    #[test]
    fn params_the_eager_pass_cannot_take_arrive_raw() {
        for (text, raw) in [
            // params before method: the method is not known yet
            (
                r#"{"jsonrpc":"2.0","params":{"name":"n"},"id":1,"method":"call"}"#,
                r#"{"name":"n"}"#,
            ),
            // not of the eager type: the caller words the error from the raw params
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"call","params":{"nom":"n"}}"#,
                r#"{"nom":"n"}"#,
            ),
            // an array would fit a derived struct, but MCP params are named
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"call","params":["n"]}"#,
                r#"["n"]"#,
            ),
            // another method
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"other","params":{"name":"n"}}"#,
                r#"{"name":"n"}"#,
            ),
        ] {
            assert_eq!(params_of(text), Err(Some(raw.to_owned())), "{text}");
        }
    }

    #[test]
    fn without_the_eager_pass_every_method_keeps_its_params_raw() {
        let text = r#"{"jsonrpc":"2.0","id":1,"method":"call","params":{"name":"n"}}"#;
        match super::decode_with::<CallParams<'_>>(text, &FrameLimits::new(10), false) {
            Decoded::Single(Entry::Request(Request {
                params: Params::Raw(Some(raw)),
                ..
            })) => assert_eq!(raw.get(), r#"{"name":"n"}"#),
            other => panic!("expected raw params, got {other:?}"),
        }
    }

    #[test]
    fn the_eager_pass_changes_no_classification() {
        // A notification of the eager method keeps its raw params.
        assert!(matches!(
            single(r#"{"jsonrpc":"2.0","method":"call","params":{"name":"n"}}"#),
            Entry::Notification(Notification { params: Some(raw), .. }) if raw.get() == r#"{"name":"n"}"#
        ));
        // Envelope errors still echo the id, whatever the params held.
        for text in [
            r#"{"jsonrpc":"1.0","id":5,"method":"call","params":{"name":"n"}}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"call","params":{"name":"n"},"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"call","params":5}"#,
        ] {
            assert_eq!(
                invalid_code(&single(text)),
                Some((Some("5".into()), -32600)),
                "{text}"
            );
        }
        // A duplicated member is a malformed object, eager or not.
        for text in [
            r#"{"jsonrpc":"2.0","id":5,"method":"call","params":{"name":"n"},"params":{}}"#,
            r#"{"jsonrpc":"2.0","id":5,"id":6,"method":"call"}"#,
        ] {
            assert_eq!(invalid_code(&single(text)), Some((None, -32600)), "{text}");
        }
        // Broken JSON inside eager params is still a parse error.
        assert!(matches!(
            single(r#"{"jsonrpc":"2.0","id":5,"method":"call","params":{"name":"#),
            Entry::Invalid { ref error, .. } if error.code().0 == -32700
        ));
    }

    #[test]
    fn a_number_beyond_f64_is_valid_json_so_an_invalid_request() {
        for text in [
            r#"{"jsonrpc":1e400,"id":5,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":-1e400}"#,
        ] {
            assert_eq!(
                invalid_code(&single(text)),
                Some((Some("5".into()), -32600)),
                "{text}"
            );
        }
        // Members read only for presence, or not at all, take any JSON number too.
        assert!(matches!(
            single(r#"{"jsonrpc":"2.0","id":5,"result":1e400}"#),
            Entry::Response { .. }
        ));
        assert!(matches!(
            single(r#"{"jsonrpc":"2.0","id":5,"method":"ping","x":-1e400}"#),
            Entry::Request(_)
        ));
    }
}
