//! Request ids, kept as the exact bytes the client sent.
//!
//! A client may use any JSON string or number as an id, including integers beyond 64 bits
//! and numbers written as `1.50`; parsing them into `i64`/`u64` (as jsonrpsee and rmcp do)
//! would change what is echoed back. We keep the raw text and compare ids by it.

use serde_json::value::RawValue;
use smol_str::SmolStr;
use std::fmt;

/// The longest request id (its JSON text) a request may have, and the longest progress
/// token: an id is copied into its answer, its cancellation and a resumable session's
/// record, a progress token into every progress notification of its request (one every
/// 50 ms for as long as it runs), so that unbounded they would multiply what a client sends.
/// Far beyond what clients use (integers, UUIDs).
pub const MAX_ID_BYTES: usize = 1024;

/// A request id exactly as received: a JSON string or number (never `null`, which MCP forbids).
/// The in-flight map, the worker and the tool context each hold a copy: an id of up to 23
/// bytes (every id clients send in practice) is kept inline, so a request's id costs no
/// allocation and its copies no reference counting; a longer one is shared.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RequestId(SmolStr);

impl RequestId {
    /// Accepts the raw JSON of an `id` member if it is a string or a number.
    /// Returns `None` for `null`, booleans, arrays and objects.
    pub fn from_raw(raw: &RawValue) -> Option<Self> {
        Self::is_valid(raw).then(|| Self(SmolStr::new(raw.get())))
    }

    /// The id whose JSON text is `json` (as [`RequestId::as_json`] gave it, in records and
    /// logs the server keeps), if it is one JSON string or number.
    pub fn from_json(json: &str) -> Option<Self> {
        Self::from_raw(serde_json::from_str::<&RawValue>(json).ok()?)
    }

    /// An integer id (for ids the server makes itself).
    pub fn from_number(n: u64) -> Self {
        Self(smol_str::format_smolstr!("{n}"))
    }

    /// Whether `raw` may serve as an id: a string or a number (MCP also forbids null). Progress
    /// tokens follow the same rule.
    pub fn is_valid(raw: &RawValue) -> bool {
        matches!(
            raw.get().as_bytes().first(),
            Some(b'"' | b'-' | b'0'..=b'9')
        )
    }

    /// The id's JSON text, ready to be spliced into a response.
    pub fn as_json(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).expect("valid json")
    }

    #[test]
    fn strings_and_numbers_are_kept_byte_exact() {
        for text in [
            r#""a""#,
            r#""\u00e9""#,
            "1",
            "-7",
            "1.50",
            "18446744073709551616",
            "1e400",
        ] {
            let id = RequestId::from_raw(&raw(text)).expect("accepted");
            assert_eq!(id.as_json(), text);
        }
    }

    #[test]
    fn null_bool_array_object_are_not_ids() {
        for text in ["null", "true", "false", "[1]", "{}"] {
            assert!(RequestId::from_raw(&raw(text)).is_none(), "{text}");
            assert!(RequestId::from_json(text).is_none(), "{text}");
        }
    }

    #[test]
    fn ids_kept_as_text_come_back_as_written() {
        for text in [
            r#""a""#,
            "7",
            "1.50",
            "18446744073709551617",
            "1e400",
            " 3 ",
        ] {
            let id = RequestId::from_json(text).expect("an id");
            assert_eq!(id.as_json(), text.trim());
        }
        for text in ["", "7 8", "[7]", r#""a"x"#] {
            assert!(RequestId::from_json(text).is_none(), "{text}");
        }
    }
}
