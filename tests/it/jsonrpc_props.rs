//! Property tests of the JSON-RPC layer (`mcp_ws::testing::jsonrpc`), on generated frames:
//!
//! - Any text, and any mutation of a valid frame, decodes without a panic, with or without
//!   frame limits; a frame is answered at most once per request it holds: a decoded frame
//!   has one entry per message, or is refused as a whole.
//! - Ids are echoed byte-exact: strings with escapes, integers beyond 64 bits, decimals and
//!   exponents come back in `encode_result` and `encode_error` exactly as sent.
//! - Classification follows JSON-RPC 2.0 whatever the member order, whitespace, or which
//!   members are present: a request (it has a readable id) is answered under its id; a
//!   notification (no id) never yields an error with an id; a malformed message is answered
//!   under its id when that id is readable, else with null; the eager pass of `tools/call`
//!   params changes no classification.
//! - A batch of n entries decodes into n entries in order, each classified as it would be
//!   alone, or, past `max_batch_len`, into one refusal counting all n.
//! - The frame scan of `FrameLimits` agrees with a model computed on the parsed value: it
//!   refuses a frame exactly when a depth, string, array or object measure exceeds its limit
//!   (a batch's own array exempt), and names an exceeded one.
//!
//! Case counts are fixed (proptest's default of 256, fewer for the larger strategies), so
//! the run takes well under a few seconds.

use mcp_ws::testing::jsonrpc::{
    decode, encode_batch, encode_error, encode_result, Decoded, Entry, FrameLimits, JsonLimit,
    RequestId, WireError,
};
use mcp_ws::testing::mcp::CallToolParams;
use proptest::prelude::*;
use serde_json::{Map, Value};

type Frame<'a> = Decoded<'a, CallToolParams<'a>>;

fn decode_plain<'a>(text: &'a str, limits: &FrameLimits) -> Frame<'a> {
    decode::<CallToolParams<'_>>(text, limits)
}

// ---- generators ----------------------------------------------------------------------

/// JSON string literals, escapes included.
fn json_string() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9 /_.-]{0,12}".prop_map(|s| format!("\"{s}\"")),
        "\\PC{0,8}".prop_map(|s| serde_json::to_string(&s).expect("a string serializes")),
        Just(r#""\u00e9\"\\\/\n""#.to_owned()),
    ]
}

/// JSON number literals as clients may write them, beyond what f64 or u64 hold included.
fn json_number() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        "[1-9][0-9]{19,40}",
        "-?(0|[1-9][0-9]{0,5})\\.[0-9]{1,6}",
        "-?[1-9][0-9]{0,3}[eE][+-]?[0-9]{1,2}",
    ]
}

fn json_id() -> impl Strategy<Value = String> {
    prop_oneof![json_string(), json_number()]
}

/// Any JSON value, nested a few levels.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(Value::from),
        any::<f32>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| Value::from(f64::from(f))),
        "[a-z\\\\\"\n é😀]{0,10}".prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 48, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(("[a-z\\\\\"é]{0,6}", inner), 0..6)
                .prop_map(|members| Value::Object(members.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// What a member of a generated envelope holds.
#[derive(Debug, Clone)]
enum Member {
    Absent,
    Text(String),
}

/// A generated message object: each member present or not, with valid or invalid values,
/// in a random order with random whitespace.
#[derive(Debug, Clone)]
struct Envelope {
    jsonrpc: Member,
    id: Member,
    method: Member,
    params: Member,
    result: Member,
    error: Member,
    order: Vec<usize>,
    space: String,
}

fn member(values: impl Strategy<Value = String>) -> impl Strategy<Value = Member> {
    prop_oneof![
        1 => Just(Member::Absent),
        3 => values.prop_map(Member::Text),
    ]
}

fn envelope() -> impl Strategy<Value = Envelope> {
    let jsonrpc = prop_oneof![
        8 => Just("\"2.0\"".to_owned()),
        1 => Just("\"1.0\"".to_owned()),
        1 => Just("2.0".to_owned()),
    ];
    let id = prop_oneof![
        6 => json_id(),
        1 => Just("null".to_owned()),
        1 => Just("{\"a\":1}".to_owned()),
        1 => Just("true".to_owned()),
    ];
    let method = prop_oneof![
        4 => Just("\"tools/call\"".to_owned()),
        4 => Just("\"ping\"".to_owned()),
        1 => Just("\"tools\\/call\"".to_owned()),
        1 => Just("7".to_owned()),
    ];
    let params = prop_oneof![
        4 => Just(r#"{"name":"echo","arguments":{"text":"x"}}"#.to_owned()),
        2 => json_value().prop_map(|v| v.to_string()),
        1 => Just("[1,2]".to_owned()),
        1 => Just("null".to_owned()),
    ];
    let outcome = || json_value().prop_map(|v| v.to_string());
    (
        member(jsonrpc),
        member(id),
        member(method),
        member(params),
        prop_oneof![6 => Just(Member::Absent), 1 => outcome().prop_map(Member::Text)],
        prop_oneof![6 => Just(Member::Absent), 1 => outcome().prop_map(Member::Text)],
        Just((0..6).collect::<Vec<usize>>()).prop_shuffle(),
        "[ \t\n\r]{0,2}",
    )
        .prop_map(
            |(jsonrpc, id, method, params, result, error, order, space)| Envelope {
                jsonrpc,
                id,
                method,
                params,
                result,
                error,
                order,
                space,
            },
        )
}

impl Envelope {
    fn members(&self) -> [(&'static str, &Member); 6] {
        [
            ("jsonrpc", &self.jsonrpc),
            ("id", &self.id),
            ("method", &self.method),
            ("params", &self.params),
            ("result", &self.result),
            ("error", &self.error),
        ]
    }

    fn text(&self) -> String {
        let members = self.members();
        let s = &self.space;
        let parts: Vec<String> = self
            .order
            .iter()
            .filter_map(|&i| match members[i] {
                (name, Member::Text(value)) => Some(format!("{s}\"{name}\"{s}:{s}{value}{s}")),
                (_, Member::Absent) => None,
            })
            .collect();
        format!("{s}{{{}}}{s}", parts.join(","))
    }

    fn value(member: &Member) -> Option<&str> {
        match member {
            Member::Text(text) => Some(text),
            Member::Absent => None,
        }
    }

    /// What JSON-RPC 2.0 (with MCP's ban on null ids) makes of this message.
    fn expected(&self) -> Expected {
        let id = Self::value(&self.id);
        let readable = id.filter(|id| !matches!(id.as_bytes()[0], b'n' | b'{' | b't'));
        let echo = || Expected::Invalid(readable.map(str::to_owned));
        let result = Self::value(&self.result).is_some();
        let error = Self::value(&self.error).is_some();
        if Self::value(&self.jsonrpc) != Some("\"2.0\"") {
            // A response by its shape answers no request, whatever else is wrong with it.
            if Self::value(&self.method).is_none() && (result || error) {
                return Expected::Dropped;
            }
            return echo();
        }
        let Some(method) = Self::value(&self.method) else {
            return match (readable, result, error) {
                (Some(id), true, false) | (Some(id), false, true) => {
                    Expected::Response(id.to_owned())
                }
                // An error whose sender could not tell the id (§5: null): answered by nothing.
                (None, false, true) if id == Some("null") => Expected::Dropped,
                // Any other response that is not a valid one: its id is of the server's
                // numbering, so nothing can be answered under it.
                (_, true, _) | (_, _, true) => Expected::Dropped,
                _ => echo(),
            };
        };
        if !method.starts_with('"') || result || error {
            return echo();
        }
        if let Some(params) = Self::value(&self.params) {
            if !matches!(params.as_bytes()[0], b'{' | b'[') {
                return echo();
            }
        }
        match (id, readable) {
            (None, _) => Expected::Notification,
            (Some(_), None) => Expected::Invalid(None),
            (Some(_), Some(id)) => Expected::Request(id.to_owned()),
        }
    }
}

/// A classification, with the id as text where there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Expected {
    Request(String),
    Notification,
    Response(String),
    Invalid(Option<String>),
    /// Never answered.
    Dropped,
}

fn classified(entry: &Entry<'_, CallToolParams<'_>>) -> Expected {
    match entry {
        Entry::Request(request) => Expected::Request(request.id.as_json().to_owned()),
        Entry::Notification(_) => Expected::Notification,
        Entry::Response { id, .. } => Expected::Response(id.as_json().to_owned()),
        Entry::Invalid { id, .. } => Expected::Invalid(id.as_ref().map(|i| i.as_json().into())),
        Entry::Dropped { .. } => Expected::Dropped,
    }
}

// ---- the model of the frame scan -------------------------------------------------------

#[derive(Debug, Default, Clone, Copy)]
struct Measures {
    depth: usize,
    string: usize,
    array: usize,
    object: usize,
}

/// Measures a value as the scan does: depth of containers, strings as written (escapes
/// included, quotes not), entries per array and members per object. `exempt` skips the
/// length of the outermost array (a batch's).
fn measure(value: &Value, level: usize, exempt: bool, m: &mut Measures) {
    let written = |s: &str| serde_json::to_string(s).expect("string").len() - 2;
    match value {
        Value::String(s) => m.string = m.string.max(written(s)),
        Value::Array(items) => {
            m.depth = m.depth.max(level + 1);
            if !exempt {
                m.array = m.array.max(items.len());
            }
            for item in items {
                measure(item, level + 1, false, m);
            }
        }
        Value::Object(members) => {
            m.depth = m.depth.max(level + 1);
            m.object = m.object.max(members.len());
            for (name, item) in members {
                m.string = m.string.max(written(name));
                measure(item, level + 1, false, m);
            }
        }
        _ => {}
    }
}

// ---- properties ------------------------------------------------------------------------

/// Checks what any decoded frame must satisfy, whatever it held.
fn check_frame_shape(frame: &Frame<'_>, max_batch_len: usize) {
    match frame {
        Decoded::Rejected(error) => {
            // A frame refused whole is answered once, with a null id.
            let text = encode_error(None, &error.to_object());
            let value: Value = serde_json::from_str(&text).expect("the refusal is JSON");
            assert_eq!(value["id"], Value::Null);
        }
        Decoded::Batch(entries) => {
            assert!(!entries.is_empty() && entries.len() <= max_batch_len);
        }
        Decoded::Single(_) => {}
    }
}

fn small_limits() -> FrameLimits {
    FrameLimits::new(4)
        .max_depth(4)
        .max_string_bytes(8)
        .max_array_len(3)
        .max_object_members(3)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn any_text_decodes_without_panicking(text in any::<String>()) {
        check_frame_shape(&decode_plain(&text, &FrameLimits::new(4)), 4);
        check_frame_shape(&decode_plain(&text, &small_limits()), 4);
    }

    #[test]
    fn any_bytes_read_as_text_decode_without_panicking(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let text = String::from_utf8_lossy(&bytes);
        check_frame_shape(&decode_plain(&text, &small_limits()), 4);
    }

    #[test]
    fn mutated_frames_decode_without_panicking(
        frames in prop::collection::vec(envelope(), 1..4),
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0..3u8, prop::sample::select(b"{}[]\",:\\ 0a".to_vec())), 1..8),
        batch in any::<bool>(),
    ) {
        let texts: Vec<String> = frames.iter().map(Envelope::text).collect();
        let mut bytes = if batch { format!("[{}]", texts.join(",")) } else { texts[0].clone() }.into_bytes();
        for (at, op, byte) in edits {
            let i = at.index(bytes.len() + 1);
            match op {
                0 => bytes.insert(i, byte),
                1 if i < bytes.len() => { bytes.remove(i); }
                _ if i < bytes.len() => bytes[i] = byte,
                _ => {}
            }
        }
        let text = String::from_utf8_lossy(&bytes);
        check_frame_shape(&decode_plain(&text, &FrameLimits::new(4)), 4);
        check_frame_shape(&decode_plain(&text, &small_limits()), 4);
    }

    #[test]
    fn ids_are_echoed_byte_exact(id in json_id(), space in "[ \t\n]{0,2}") {
        let text = format!(r#"{{"jsonrpc":"2.0",{space}"id"{space}:{space}{id}{space},"method":"ping"}}"#);
        let Decoded::Single(Entry::Request(request)) = decode_plain(&text, &FrameLimits::new(1)) else {
            panic!("a request: {text}");
        };
        prop_assert_eq!(request.id.as_json(), id.as_str());
        let result = encode_result(&request.id, "{}");
        prop_assert_eq!(result, format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#));
        let error = encode_error(Some(&request.id), &WireError::Parse.to_object());
        let prefix = format!(r#"{{"jsonrpc":"2.0","id":{id},"error":"#);
        prop_assert!(error.starts_with(&prefix), "{}", error);
        let parsed: Value = serde_json::from_str(&error).expect("valid JSON");
        let sent: Value = serde_json::from_str(&id).expect("valid JSON");
        prop_assert_eq!(&parsed["id"], &sent);
    }

    #[test]
    fn messages_are_classified_as_json_rpc_says(message in envelope()) {
        let text = message.text();
        let Decoded::Single(entry) = decode_plain(&text, &FrameLimits::new(1)) else {
            panic!("a single message: {text}");
        };
        prop_assert_eq!(classified(&entry), message.expected(), "{}", text);
        // Whatever the eager pass did, an error goes out under the id the model expects.
        if let Entry::Invalid { id, error } = &entry {
            let frame = encode_error(id.as_ref(), &error.to_object());
            let value: Value = serde_json::from_str(&frame).expect("valid JSON");
            match id {
                Some(id) => prop_assert_eq!(&value["id"], &serde_json::from_str::<Value>(id.as_json()).expect("json")),
                None => prop_assert_eq!(&value["id"], &Value::Null),
            }
        }
    }

    #[test]
    fn a_batch_is_its_entries_in_order_or_one_refusal(
        messages in prop::collection::vec(envelope(), 1..12),
        max_batch_len in 1usize..12,
    ) {
        let texts: Vec<String> = messages.iter().map(Envelope::text).collect();
        let frame = format!("[{}]", texts.join(","));
        match decode_plain(&frame, &FrameLimits::new(max_batch_len)) {
            Decoded::Batch(entries) => {
                prop_assert!(messages.len() <= max_batch_len);
                prop_assert_eq!(entries.len(), messages.len());
                for (entry, message) in entries.iter().zip(&messages) {
                    prop_assert_eq!(classified(entry), message.expected());
                }
            }
            Decoded::Rejected(WireError::BatchTooLarge { limit, received }) => {
                prop_assert!(messages.len() > max_batch_len);
                prop_assert_eq!((limit, received), (max_batch_len, messages.len()));
            }
            other => panic!("{other:?} for {frame}"),
        }
    }

    #[test]
    fn encoded_batches_are_json_arrays_of_their_parts(values in prop::collection::vec(json_value(), 1..8)) {
        let parts: Vec<String> = values.iter().map(Value::to_string).collect();
        let batch: Value = serde_json::from_str(&encode_batch(&parts)).expect("valid JSON");
        prop_assert_eq!(batch, Value::Array(values));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_frame_scan_agrees_with_a_model_of_the_value(
        value in json_value(),
        pretty in any::<bool>(),
        limits in (1usize..8, 1usize..12, 1usize..6, 1usize..6),
    ) {
        let text = if pretty {
            serde_json::to_string_pretty(&value).expect("serializes")
        } else {
            value.to_string()
        };
        let (depth, string, array, object) = limits;
        let frame_limits = FrameLimits::new(100)
            .max_depth(depth)
            .max_string_bytes(string)
            .max_array_len(array)
            .max_object_members(object);
        let mut m = Measures::default();
        measure(&value, 0, value.is_array(), &mut m);
        let exceeded: Vec<JsonLimit> = [
            (m.depth > depth, JsonLimit::Depth),
            (m.string > string, JsonLimit::StringBytes),
            (m.array > array, JsonLimit::ArrayLen),
            (m.object > object, JsonLimit::ObjectMembers),
        ]
        .into_iter()
        .filter_map(|(over, kind)| over.then_some(kind))
        .collect();
        match frame_limits.check(&text) {
            Ok(()) => prop_assert!(exceeded.is_empty(), "{:?} missed in {}", exceeded, text),
            Err(e) => {
                prop_assert!(exceeded.contains(&e.kind), "{:?} reported, {:?} exceeded: {}", e, exceeded, text);
                let limit = match e.kind {
                    JsonLimit::Depth => depth,
                    JsonLimit::StringBytes => string,
                    JsonLimit::ArrayLen => array,
                    JsonLimit::ObjectMembers => object,
                };
                prop_assert_eq!(e.limit, limit);
            }
        }
        // A request over a limit is refused under its own id; within it, it is a request.
        let message = format!(r#"{{"jsonrpc":"2.0","id":"m","method":"x","params":{{"v":{text}}}}}"#);
        let limits_for_message = FrameLimits::new(100).max_depth(depth + 2);
        match decode_plain(&message, &limits_for_message) {
            Decoded::Single(Entry::Invalid { id, error }) => {
                prop_assert!(m.depth > depth);
                prop_assert!(matches!(error, WireError::LimitExceeded(_)));
                prop_assert_eq!(id.map(|i| i.as_json().to_owned()), Some("\"m\"".to_owned()));
            }
            Decoded::Single(Entry::Request(request)) => {
                prop_assert!(m.depth <= depth);
                prop_assert_eq!(request.id.as_json(), "\"m\"");
            }
            other => panic!("{other:?} for {message}"),
        }
    }
}

#[test]
fn request_ids_compare_by_their_text() {
    // "1" and "1.0" are different ids: they are kept as sent, never normalized.
    let one =
        RequestId::from_raw(&serde_json::value::RawValue::from_string("1".into()).expect("json"));
    let one_point_zero =
        RequestId::from_raw(&serde_json::value::RawValue::from_string("1.0".into()).expect("json"));
    assert_ne!(one, one_point_zero);
}
