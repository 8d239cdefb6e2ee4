//! What is recorded of each request when it is done: its latency, in the histogram of its
//! method (`/metrics`), and its access-log line, an `info` event of the target
//! `mcp_ws::access` (this module's path).
//!
//! A [`RequestRecord`] is begun when a request arrives in its session and finished when it
//! is answered (inline, or by its worker) or cancelled: exactly one line per request. The
//! line carries the request's id, method and params (the values of `logging.redact_keys`
//! replaced, at any depth, and cut at `logging.access_params_max_bytes`), the outcome (`ok`,
//! `error` with its `code`, `timed_out`, `cancelled`), the duration, the client's address,
//! `User-Agent` and identity, the session and the trace id.
//!
//! Cost: the clock is read when a request arrives and when it is answered (the worker's
//! deadline reuses the first read, the line's timestamp the second). Whether the access
//! target is enabled is asked once per session ([`SessionFields`]); when it is filtered
//! out, nothing is copied or formatted. When it is written, the params text is the record's
//! one allocation: the id is shared, the trace id is kept only when the request has its own
//! (the session's is read where the session keeps it), a method the server serves is
//! written as its label (another kept inline), and every client string is escaped as the
//! line is formatted ([`Clean`]), not copied first. Params that are compact JSON of plain
//! strings and integers are copied byte by byte (redacted members skipped), and when they
//! are ASCII, quoted in that same copy as the line's field value; the rest is transcoded
//! through `serde_json` and quoted when the line is written; the output is the same. The
//! fields a session's lines share (address, agent, identity, trace id) are rendered once
//! per session ([`SessionFields`]). The line is written by hand, as the `fmt` layer would
//! write it, and goes to the log's background writer ([`telemetry`]): no `tracing`
//! dispatch, no `core::fmt` and no system call on the event loop (outside the binary's log,
//! or inside an enabled span, it is an ordinary `tracing` event).
//!
//! Client strings cannot forge fields: in JSON the formatter escapes them; in the text
//! format a value that is not a plain token is quoted and escaped
//! ([`TextFields`](crate::observe::telemetry::TextFields)).

use crate::floor_char_boundary;
use crate::observe::metrics::{MethodLabel, Metrics};
use crate::observe::telemetry::{self, event_name, field_name};
use crate::protocol::jsonrpc::{self, Params, RequestId};
use crate::protocol::mcp::{CallToolParams, Error, RequestMeta};
use aho_corasick::{AhoCorasick, AhoCorasickKind};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use smol_str::SmolStr;
use std::cell::{Cell, OnceCell};
use std::fmt::{self, Write};
use std::sync::LazyLock;
use std::time::Instant;
use wide::u8x16;

/// The target of access-log lines (`RUST_LOG=mcp_ws::access=off` turns them off).
pub const TARGET: &str = "mcp_ws::access";

/// The access line's target and message, as [`telemetry::write_direct`] writes them.
const LINE_EVENT: telemetry::EventName = event_name!("mcp_ws::access", "request");

/// Longest id or method text in a line, in bytes; longer is cut (a client chooses them).
const MAX_NAME_BYTES: usize = 128;

/// What the access log hides: members whose name contains one of the configured fragments.
#[derive(Debug)]
pub struct Redaction {
    /// The fragments, normalized (lowercase, without `_` and `-`), as one automaton: a name
    /// is read once whatever the number of fragments. A window-by-window comparison with
    /// each fragment cost a `memcmp` call per window and fragment: 25,000 instructions for
    /// the long `_meta` names of a 2026-07-28 request (benches/README, "Redaction by
    /// automaton"). `None` only if the fragments are beyond what an automaton can hold:
    /// then every member is hidden (and a warning said so at startup).
    fragments: Option<AhoCorasick>,
    /// The shortest fragment's length: a shorter name contains none.
    shortest: usize,
    max_bytes: usize,
}

/// What a redacted value is written as.
const REDACTED: &str = "\"[redacted]\"";

/// The error that stops a transcoding once its output is long enough.
const FULL: &str = "access-log params budget reached";

impl Redaction {
    /// From `logging.redact_keys` and `logging.access_params_max_bytes`.
    pub fn new(keys: &[String], max_bytes: usize) -> Self {
        let fragments: Vec<String> = keys.iter().map(|k| normalize(k)).collect();
        Self {
            shortest: fragments
                .iter()
                .map(String::len)
                .min()
                .unwrap_or(usize::MAX),
            fragments: fragment_automaton(&fragments)
                .inspect_err(|error| {
                    tracing::warn!(
                        %error,
                        "logging.redact_keys cannot be matched: every params member is redacted"
                    )
                })
                .ok(),
            max_bytes,
        }
    }

    /// Whether a member of this name is redacted.
    pub fn hides(&self, key: &str) -> bool {
        let ascii = key.is_ascii();
        // An ASCII name is no longer once normalized: shorter than every fragment, it
        // contains none.
        if ascii && key.len() < self.shortest {
            return false;
        }
        // Member names are short and ASCII: normalized on the stack, not in a new String.
        let mut buffer = [0u8; 64];
        if ascii && key.len() <= buffer.len() {
            let mut len = 0;
            for byte in key.bytes().filter(|b| *b != b'_' && *b != b'-') {
                buffer[len] = byte.to_ascii_lowercase();
                len += 1;
            }
            return self.contains_fragment(&buffer[..len]);
        }
        self.contains_fragment(normalize(key).as_bytes())
    }

    /// Whether a normalized name contains a fragment (fails closed: see `fragments`).
    fn contains_fragment(&self, normalized: &[u8]) -> bool {
        self.fragments
            .as_ref()
            .is_none_or(|fragments| fragments.is_match(normalized))
    }

    /// `json` (valid JSON) with the values of hidden members replaced by `"[redacted]"`, at
    /// any depth, cut to at most `max_bytes` (then ending in `…`). Streams: no tree is built,
    /// and a long value stops being read once the budget is spent.
    pub fn apply(&self, json: &str) -> String {
        let mut out = String::with_capacity(json.len().min(self.max_bytes) + 4);
        self.append(json, &mut out);
        out
    }

    /// [`apply`](Self::apply), appended to `out`, within the budget left in `out`.
    fn append(&self, json: &str, out: &mut String) {
        if out.len() >= self.max_bytes {
            return;
        }
        // Most params are compact JSON of plain strings and integers: copied as they are
        // (what the transcoding below would write), unless the budget is reached.
        let start = out.len();
        if self.copy_plain(json, out, false) && out.len() < self.max_bytes {
            return;
        }
        out.truncate(start);
        self.transcode(json, out);
    }

    /// [`append`](Self::append) through `serde_json`, for any JSON.
    fn transcode(&self, json: &str, out: &mut String) {
        let mut de = serde_json::Deserializer::from_str(json);
        let transcode = Transcode {
            redaction: self,
            out: &mut *out,
        };
        if transcode.deserialize(&mut de).is_err() && out.len() >= self.max_bytes {
            cut(out, self.max_bytes);
        }
    }

    /// Appends `json` (valid JSON) with hidden members' values redacted, byte for byte as the
    /// transcoding of [`append`](Self::append) writes it, when that is a copy: no whitespace
    /// between tokens, strings without escapes, DEL or C1 controls (a hidden value is not
    /// copied: whatever it holds), integers of at most 18 digits other than `-0` (no
    /// floats), nesting within 64. Returns `false` at anything else, `out` then holding part
    /// of a copy. The budget is the caller's to check.
    ///
    /// With `quote`, every `"` of the copy is written `\"`: the copy as the inside of a quoted
    /// field value (the copy has no `\` of its own to escape), made of ASCII JSON only.
    fn copy_plain(&self, json: &str, out: &mut String, quote: bool) -> bool {
        let bytes = json.as_bytes();
        let mut depth = 0u32;
        // Tokens are checked one by one but copied in runs, from `copied` to the next `"` to
        // quote, redacted value or the end: a copy per token cost more than the check.
        let mut copied = 0;
        let mut i = 0;
        while i < bytes.len() {
            let start = i;
            match bytes[i] {
                b'"' => {
                    // The closing `"`, found by the same pass that checks the string for
                    // what rules a copy out (outside strings, any byte this match does not
                    // expect rules it out); in JSON without whitespace, a string followed
                    // by `:` is a member's name.
                    let Some(end) = plain_string_end(bytes, start + 1, quote) else {
                        return false;
                    };
                    i = end + 1;
                    if bytes.get(i) == Some(&b':') && self.hides(&json[start + 1..end]) {
                        out.push_str(&json[copied..start]);
                        push_string_token(out, &json[start..i], quote);
                        out.push(':');
                        push_string_token(out, REDACTED, quote);
                        i = skip_value(bytes, i + 1);
                        copied = i;
                    } else if quote {
                        // The run up to the string, then the string up to its closing `"`,
                        // each followed by the `\` of the `"` after it.
                        out.push_str(&json[copied..start]);
                        out.push('\\');
                        out.push_str(&json[start..end]);
                        out.push('\\');
                        copied = end;
                    }
                }
                b'{' | b'[' => {
                    if depth == 64 {
                        return false;
                    }
                    depth += 1;
                    i += 1;
                }
                b'}' | b']' => {
                    depth = depth.saturating_sub(1);
                    i += 1;
                }
                b',' | b':' => i += 1,
                b'-' | b'0'..=b'9' => {
                    i += 1;
                    while i < bytes.len() && bytes[i].is_ascii_digit() {
                        i += 1;
                    }
                    let digits = i - start - usize::from(bytes[start] == b'-');
                    let float = matches!(bytes.get(i), Some(b'.' | b'e' | b'E'));
                    if float || digits > 18 || &bytes[start..i] == b"-0" {
                        return false;
                    }
                }
                b't' | b'n' => i += 4,
                b'f' => i += 5,
                _ => return false,
            }
        }
        match json.get(copied..) {
            Some(run) => {
                out.push_str(run);
                true
            }
            None => false,
        }
    }

    /// A request's params for its line: the raw params, or for a `tools/call` parsed in the
    /// decoder's pass, its name, arguments and `_meta` written back as JSON. Quoted in the
    /// same pass when that is a copy ([`quoted`](Self::quoted)), else as JSON to be quoted
    /// when the line is written.
    fn params(&self, params: &Params<'_, CallToolParams<'_>>) -> LineParams {
        match self.quoted(params) {
            Some(quoted) => LineParams::Quoted(quoted),
            None => self.json(params),
        }
    }

    /// What [`params`](Self::params) writes, as JSON.
    fn json(&self, params: &Params<'_, CallToolParams<'_>>) -> LineParams {
        LineParams::Json(match params {
            Params::Raw(None) => return LineParams::Absent,
            Params::Raw(Some(raw)) => self.apply(raw.get()),
            Params::Parsed(call) => {
                let mut out = String::with_capacity(64);
                out.push_str("{\"name\":");
                push_json_string(&mut out, &call.name, self.max_bytes);
                if let Some(arguments) = call.arguments {
                    out.push_str(",\"arguments\":");
                    self.append(arguments.get(), &mut out);
                }
                if let Some(meta) = &call.meta {
                    if let Ok(meta) = serde_json::to_string(meta) {
                        out.push_str(",\"_meta\":");
                        self.append(&meta, &mut out);
                    }
                }
                out.push('}');
                if out.len() > self.max_bytes {
                    cut(&mut out, self.max_bytes);
                }
                out
            }
        })
    }

    /// What [`params`](Self::params) writes as JSON, already quoted as the line's field
    /// value, when the JSON is a copy ([`copy_plain`](Self::copy_plain)) in ASCII, an object
    /// or an array, shorter than the budget: then quoting it is escaping its `"` (no `\`,
    /// control or non-ASCII character to escape), the same in the text and JSON formats, and
    /// it is done as the copy is made instead of in a second pass over the line.
    fn quoted(&self, params: &Params<'_, CallToolParams<'_>>) -> Option<String> {
        // Each branch makes the copy's buffer at its size: `with_capacity` allocates
        // directly, where `reserve` on an empty `String` went through the growth path.
        let mut out;
        match params {
            Params::Raw(None) => return None,
            Params::Raw(Some(raw)) => {
                let raw = raw.get();
                if !raw.starts_with(['{', '[']) {
                    return None;
                }
                out = String::with_capacity(raw.len() + 32);
                out.push('"');
                if !self.copy_plain(raw, &mut out, true) {
                    return None;
                }
            }
            Params::Parsed(call) => {
                let name = &*call.name;
                // Printable ASCII but `"` and `\`: written as it is inside the quotes, in one
                // pass over the name.
                if name
                    .bytes()
                    .any(|b| !(0x20..0x7f).contains(&b) || b == b'"' || b == b'\\')
                {
                    return None;
                }
                let arguments = call.arguments.map_or("", |a| a.get());
                out = String::with_capacity(name.len() + arguments.len() + 64);
                out.push_str("\"{\\\"name\\\":\\\"");
                out.push_str(name);
                // The name's closing `"` and the next member's name in one copy.
                if let Some(arguments) = call.arguments {
                    out.push_str("\\\",\\\"arguments\\\":");
                    if !self.copy_plain(arguments.get(), &mut out, true) {
                        return None;
                    }
                } else {
                    out.push_str("\\\"");
                }
                if let Some(meta) = &call.meta {
                    let meta = serde_json::to_string(meta).ok()?;
                    out.push_str(",\\\"_meta\\\":");
                    if !self.copy_plain(&meta, &mut out, true) {
                        return None;
                    }
                }
                out.push('}');
            }
        }
        out.push('"');
        // JSON without a `"` is a plain token, which the text format writes unquoted (a
        // parsed call's always has its `\"name\"`).
        if matches!(params, Params::Raw(_)) && !out.as_bytes().contains(&b'\\') {
            return None;
        }
        // The JSON's own length, counted only near the budget: the quotes around it and one
        // `\` per `"` inside are not part of it.
        let within = out.len() - 2 < self.max_bytes
            || out.len() - 2 - out.bytes().filter(|&b| b == b'\\').count() < self.max_bytes;
        within.then_some(out)
    }
}

/// A request's params as its line shows them.
enum LineParams {
    /// No params: `-`.
    Absent,
    /// Redacted and cut JSON, quoted as the line is written.
    Json(String),
    /// The field's value as written, quoted already ([`Redaction::quoted`]).
    Quoted(String),
}

impl fmt::Display for LineParams {
    /// The params' JSON (a [`Quoted`](Self::Quoted) value unquoted again): what a `tracing`
    /// event shows, quoting it as its formatter does.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Absent => f.write_str("-"),
            Self::Json(json) => f.write_str(json),
            Self::Quoted(quoted) => {
                let inner = &quoted[1..quoted.len() - 1];
                for (n, part) in inner.split("\\\"").enumerate() {
                    if n > 0 {
                        f.write_char('"')?;
                    }
                    f.write_str(part)?;
                }
                Ok(())
            }
        }
    }
}

/// Appends a JSON string token (`"` first and last, nothing escaped inside), with `quote` its
/// two `"` written `\"`.
fn push_string_token(out: &mut String, token: &str, quote: bool) {
    if quote {
        out.push_str("\\\"");
        out.push_str(&token[1..token.len() - 1]);
        out.push_str("\\\"");
    } else {
        out.push_str(token);
    }
}

/// The automaton of normalized `fragments` ([`Redaction`]): a DFA, since names are short
/// and many (a prefilter's setup costs more than it skips on a few bytes).
///
/// # Errors
/// When the fragments are beyond what an automaton can hold.
fn fragment_automaton(fragments: &[String]) -> Result<AhoCorasick, aho_corasick::BuildError> {
    AhoCorasick::builder()
        .kind(Some(AhoCorasickKind::DFA))
        .prefilter(false)
        .build(fragments)
}

fn normalize(key: &str) -> String {
    key.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

/// Cuts `out` to at most `max` bytes (at a character boundary) and marks the cut.
fn cut(out: &mut String, max: usize) {
    let end = floor_char_boundary(out, max);
    out.truncate(end);
    out.push('…');
}

/// Writes `text` as a JSON string, escaping what JSON requires and every control character
/// (C1 included, which JSON allows but a terminal would act on), reading at most about `max`
/// bytes of it. Runs without escapes are copied whole.
fn push_json_string(out: &mut String, text: &str, max: usize) {
    let end = floor_char_boundary(text, max);
    let text_part = &text[..end];
    out.push('"');
    let bytes = text_part.as_bytes();
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        if !JSON_SPECIAL[usize::from(bytes[i])] {
            i += 1;
            continue;
        }
        let (escape, width): (Option<&str>, usize) = match bytes[i] {
            b'"' => (Some("\\\""), 1),
            b'\\' => (Some("\\\\"), 1),
            b'\n' => (Some("\\n"), 1),
            b'\r' => (Some("\\r"), 1),
            b'\t' => (Some("\\t"), 1),
            0..=0x1f | 0x7f => (None, 1),
            0xc2 if matches!(bytes.get(i + 1), Some(0x80..=0x9f)) => (None, 2),
            _ => {
                i += 1;
                continue;
            }
        };
        out.push_str(&text_part[copied..i]);
        match escape {
            Some(escape) => out.push_str(escape),
            None => {
                let c = text_part[i..].chars().next().unwrap_or_default();
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
        }
        i += width;
        copied = i;
    }
    out.push_str(&text_part[copied..]);
    if end < text.len() {
        out.push('…');
    }
    out.push('"');
}

/// The bytes [`push_json_string`] looks at twice: `"`, `\\`, C0 controls, DEL, and the first
/// byte of a C1 control (`0xc2`); every other byte is copied as it is.
static JSON_SPECIAL: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = true;
        byte += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table[0x7f] = true;
    table[0xc2] = true;
    table
};

/// The index of the `"` that ends the string whose text starts at `at` in `bytes`, when
/// the text is what [`Redaction::copy_plain`] copies as it is: no `\`, C0 control or DEL,
/// and with `ascii` nothing beyond ASCII, else no C1 control (`0xc2` then `0x80..=0x9f`).
/// `None` when it holds one of those, or has no end.
///
/// One pass, sixteen bytes at a time ([`lane_stops`]), looks for the closing `"` and for
/// those bytes together: about one instruction a byte, where a word-wide bit trick took
/// three and a half (strings in params are short: a call to `memchr` per string cost as
/// much as this in its set-up). The last bytes are tested in a copy padded with `"`, which
/// ends a scan that finds no real end at the padding.
fn plain_string_end(bytes: &[u8], at: usize, ascii: bool) -> Option<usize> {
    const LANES: usize = 16;
    let mut i = at;
    loop {
        let rest = bytes.get(i..)?;
        let lanes = match rest.first_chunk::<LANES>() {
            Some(lanes) => *lanes,
            None => {
                let mut padded = [b'"'; LANES];
                padded[..rest.len()].copy_from_slice(rest);
                padded
            }
        };
        let stops = lane_stops(lanes, ascii);
        if stops == 0 {
            i += LANES;
            continue;
        }
        let found = i + stops.trailing_zeros() as usize;
        match plain_string_stop(bytes, found, ascii) {
            Stop::End => return Some(found),
            Stop::Refuse => return None,
            Stop::Pass => i = found + 1,
        }
    }
}

/// The bytes of `lanes` [`plain_string_end`] stops at, as bits (bit `n` for byte `n`):
/// `"`, `\`, below 0x20, and from DEL on (`ascii`) or DEL and C1's lead byte `0xc2`. One
/// SIMD test of the sixteen.
fn lane_stops(lanes: [u8; 16], ascii: bool) -> u32 {
    let v = u8x16::new(lanes);
    let unusual = if ascii {
        // `b - 0x20` (wrapping) from 0x5f on: below 0x20 or from DEL on.
        let shifted = v - u8x16::splat(0x20);
        shifted.max(u8x16::splat(0x5f)).simd_eq(shifted)
    } else {
        v.min(u8x16::splat(0x1f)).simd_eq(v)
            | v.simd_eq(u8x16::splat(0x7f))
            | v.simd_eq(u8x16::splat(0xc2))
    };
    (v.simd_eq(u8x16::splat(b'"')) | v.simd_eq(u8x16::splat(b'\\')) | unusual).to_bitmask()
}

/// Whether [`plain_string_end`] looks twice at byte `b`: the end of a string, or a byte
/// that may rule its copy out.
fn stops_plain_string(b: u8, ascii: bool) -> bool {
    b == b'"' || b == b'\\' || b < 0x20 || b == 0x7f || if ascii { b >= 0x80 } else { b == 0xc2 }
}

/// What a byte [`plain_string_end`] stops at means.
enum Stop {
    /// The string's closing `"`.
    End,
    /// A byte that rules the copy out.
    Refuse,
    /// A byte that does not: a lead byte of UTF-8 that starts no C1 control.
    Pass,
}

/// What the byte at `at` of `bytes` means to [`plain_string_end`].
fn plain_string_stop(bytes: &[u8], at: usize, ascii: bool) -> Stop {
    match bytes.get(at) {
        Some(b'"') => Stop::End,
        Some(0xc2) if !ascii && !matches!(bytes.get(at + 1), Some(0x80..=0x9f)) => Stop::Pass,
        Some(&b) if stops_plain_string(b, ascii) => Stop::Refuse,
        Some(_) => Stop::Pass,
        None => Stop::Refuse,
    }
}

/// Where the JSON value starting at `at` of `bytes` (valid JSON, no whitespace before it)
/// ends.
fn skip_value(bytes: &[u8], at: usize) -> usize {
    let mut depth = 0usize;
    let mut i = at;
    let mut in_string = false;
    while i < bytes.len() {
        let byte = bytes[i];
        if in_string {
            match byte {
                b'\\' => i += 1,
                b'"' => {
                    in_string = false;
                    if depth == 0 {
                        return i + 1;
                    }
                }
                _ => {}
            }
        } else {
            match byte {
                b'"' => in_string = true,
                b'{' | b'[' => depth += 1,
                b'}' | b']' if depth == 0 => return i,
                b'}' | b']' => {
                    depth -= 1;
                    if depth == 0 {
                        return i + 1;
                    }
                }
                b',' if depth == 0 => return i,
                _ => {}
            }
        }
        i += 1;
    }
    bytes.len()
}

/// Re-writes one JSON value into `out`, redacting as it goes; fails with [`FULL`] once
/// `out` holds the budget.
struct Transcode<'a> {
    redaction: &'a Redaction,
    out: &'a mut String,
}

impl Transcode<'_> {
    fn check<E: de::Error>(&self) -> Result<(), E> {
        if self.out.len() >= self.redaction.max_bytes {
            return Err(E::custom(FULL));
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Transcode<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Transcode<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.out.push_str(if v { "true" } else { "false" });
        self.check()
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        let _ = write!(self.out, "{v}");
        self.check()
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        let _ = write!(self.out, "{v}");
        self.check()
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        match serde_json::Number::from_f64(v) {
            Some(n) => {
                let _ = write!(self.out, "{n}");
            }
            None => self.out.push_str("null"),
        }
        self.check()
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        let room = self.redaction.max_bytes.saturating_sub(self.out.len());
        push_json_string(self.out, v, room);
        self.check()
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.out.push_str("null");
        self.check()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.out.push('[');
        let mut first = true;
        loop {
            if !first {
                self.out.push(',');
            }
            let element = Transcode {
                redaction: self.redaction,
                out: &mut *self.out,
            };
            if seq.next_element_seed(element)?.is_none() {
                if !first {
                    self.out.pop();
                }
                break;
            }
            first = false;
        }
        self.out.push(']');
        self.check()
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.out.push('{');
        let mut first = true;
        loop {
            let key = Key {
                redaction: self.redaction,
                out: &mut *self.out,
                comma: !first,
            };
            let Some(hidden) = map.next_key_seed(key)? else {
                break;
            };
            first = false;
            self.out.push(':');
            if hidden {
                map.next_value::<IgnoredAny>()?;
                self.out.push_str(REDACTED);
            } else {
                map.next_value_seed(Transcode {
                    redaction: self.redaction,
                    out: &mut *self.out,
                })?;
            }
            self.check()?;
        }
        self.out.push('}');
        self.check()
    }
}

/// Writes a member's name (after a comma unless it is the first); says whether its value is
/// hidden.
struct Key<'a> {
    redaction: &'a Redaction,
    out: &'a mut String,
    comma: bool,
}

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
        if self.comma {
            self.out.push(',');
        }
        let room = self.redaction.max_bytes.saturating_sub(self.out.len());
        push_json_string(self.out, v, room);
        Ok(self.redaction.hides(v))
    }
}

/// A request from its arrival to its answer; see the module docs.
pub(crate) struct RequestRecord {
    started: Instant,
    method: MethodLabel,
    /// What the access-log line needs beyond the session's admission, captured while the
    /// frame is at hand; `None` when the line is filtered out. Held inline: a box cost an
    /// allocation per request for a record that moves twice.
    line: Option<AccessLine>,
}

/// Copies of the frame's parts, taken as they are (escaping waits for the line, see
/// [`Clean`]): the id shares the request's (inline up to 23 bytes), the params are the one
/// text built (an allocation per logged request: the line is written when the request
/// ends, after its frame is gone).
struct AccessLine {
    id: RequestId,
    /// The method as the client wrote it (inline up to 23 bytes), only when it is not one
    /// the server serves: those are written as their metrics label.
    unserved_method: Option<SmolStr>,
    params: LineParams,
    /// The request's own trace id (from its `_meta`), when it has one; else the line shows
    /// its session's, which is not copied for it.
    own_trace_id: Option<Box<str>>,
}

impl AccessLine {
    /// The method as the line writes it: its label when served, else the client's text.
    fn method(&self, label: MethodLabel) -> &str {
        label
            .served()
            .or(self.unserved_method.as_deref())
            .unwrap_or_default()
    }

    /// Writes the line's fields, as the `fmt` layer writes those of [`log`](Self::log)
    /// (tested byte for byte), in as few copies as it can: what a session's lines share
    /// rendered once ([`SessionFields`]), the fields around a served method and after an
    /// outcome joined at compile or start-up time ([`telemetry::Lead`]).
    fn write(
        &self,
        out: &mut telemetry::Line<'_>,
        ending: &Ending,
        admission: &impl Requester,
        fields: &SessionFields,
    ) {
        let &Ending {
            method,
            session,
            outcome,
            duration_us,
        } = ending;
        let head = |out: &mut telemetry::Line<'_>| {
            out.u64(field_name!("session"), session);
            out.lead(field_name!("id"));
        };
        let requester = |out: &mut telemetry::Line<'_>, trace_id: &str| {
            let mut scratch = String::new();
            let mut peer = [0u8; 16];
            out.display(
                field_name!("peer"),
                peer_text(admission.peer(), &mut peer, &mut scratch),
            );
            let user_agent = admission.user_agent().unwrap_or("-");
            out.display(field_name!("user_agent"), clean(user_agent, &mut scratch));
            out.display(
                field_name!("identity"),
                clean(admission.subject(), &mut scratch),
            );
            out.display(field_name!("trace_id"), clean(trace_id, &mut scratch));
        };
        let shared = fields.shared(out, |out| {
            head(out);
            let at = out.written();
            requester(out, admission.trace_id());
            at
        });
        match shared {
            Some((rendered, _)) => out.rendered(rendered),
            None => head(out),
        }
        let mut scratch = String::new();
        let id = self.id.as_json();
        if id.len() <= MAX_NAME_BYTES && !id.starts_with('"') {
            // A number (an id is a JSON string or number): its digits, sign, `.`, `e` and
            // `+` are a plain token that JSON writes as it is.
            out.token_value(id);
        } else {
            out.display_value(clean(id, &mut scratch));
        }
        match method_lead(method) {
            Some(lead) => out.lead(lead),
            None => {
                out.display(
                    field_name!("method"),
                    clean(self.method(method), &mut scratch),
                );
                out.lead(field_name!("params"));
            }
        }
        match &self.params {
            LineParams::Absent => out.display_value("-"),
            LineParams::Json(json) => out.display_value(json),
            LineParams::Quoted(quoted) => out.quoted_value(quoted),
        }
        out.lead(outcome.label_and_lead().1);
        if let Some(code) = outcome.code() {
            out.i64_value(code);
            out.lead(field_name!("duration_us"));
        }
        out.u64_value(duration_us);
        // The request's own trace id (from its `_meta`) is not the session's.
        match (shared, &self.own_trace_id) {
            (Some((_, rendered)), None) => out.rendered(rendered),
            (_, own) => requester(out, own.as_deref().unwrap_or(admission.trace_id())),
        }
    }

    /// Logs the line as a `tracing` event (when [`telemetry::write_direct`] cannot write
    /// it). Every client string through `Clean`, escaped as it is written: nothing is
    /// copied for the line, and the text format quotes whatever is not a plain token.
    fn log(&self, ending: &Ending, admission: &impl Requester) {
        tracing::info!(
            target: TARGET,
            session = ending.session,
            id = %Clean(self.id.as_json()),
            method = %Clean(self.method(ending.method)),
            params = %self.params,
            outcome = ending.outcome.label(),
            code = ending.outcome.code(),
            duration_us = ending.duration_us,
            peer = %Peer(admission.peer()),
            user_agent = %Clean(admission.user_agent().unwrap_or("-")),
            identity = %Clean(admission.subject()),
            trace_id = %Clean(self.own_trace_id.as_deref().unwrap_or(admission.trace_id())),
            "request"
        );
    }
}

/// What a line says of its request's end, besides the request.
struct Ending {
    method: MethodLabel,
    session: u64,
    outcome: Outcome,
    duration_us: u64,
}

/// ` method=<name> params=` and its JSON form for each method the server serves, by its
/// label's index: the fields around a served method's name, one copy into a line.
static METHOD_LEADS: LazyLock<Box<[Option<MethodLead>]>> = LazyLock::new(|| {
    MethodLabel::all()
        .map(|label| {
            label.served().map(|name| MethodLead {
                text: format!(" method={name} params="),
                json: format!(",\"method\":\"{name}\",\"params\":"),
            })
        })
        .collect()
});

/// One of [`METHOD_LEADS`], in the text and JSON formats.
struct MethodLead {
    text: String,
    json: String,
}

/// The [`METHOD_LEADS`] of a served method.
fn method_lead(label: MethodLabel) -> Option<telemetry::Lead> {
    let lead = METHOD_LEADS.get(label.index())?.as_ref()?;
    Some(telemetry::Lead::new(&lead.text, &lead.json))
}

/// What a session's access lines share, rendered once: the fields ahead of the id
/// (` session=N id=`), and the last fields, the same in each of its requests that has no
/// trace id of its own: `peer`, `user_agent`, `identity` and `trace_id` (what the perimeter
/// admitted). Rendered at the session's second line, both in one text, and copied into
/// every line after it; a session of one request (a 2026-07-28 request's, or one idle since
/// `initialize`) renders nothing ahead and keeps only the empty cell. It also keeps whether
/// the session writes access lines at all, asked once. One text and its split, not two
/// cells: the struct stays 24 bytes (a second cell cost 232 B a session at 18,000,
/// benches/README, "The access line in fewer copies").
#[derive(Default)]
pub(crate) struct SessionFields {
    /// The fields ahead of the id, then the last fields.
    rendered: OnceCell<Box<str>>,
    /// Where the last fields start in `rendered`.
    split: Cell<u32>,
    /// Whether the session's first line is written (it renders its fields in place).
    first_written: Cell<bool>,
    /// Whether the access target is enabled, asked of the filter at the session's first
    /// request: the filter is set once for the process, and asking it cost each request a
    /// dispatch (about 130 instructions).
    logged: OnceCell<bool>,
}

impl SessionFields {
    /// The fields ahead of the id and the last fields, rendered by `render` (which returns
    /// where the last fields start) at the session's second line; `None` at its first,
    /// which writes them in place.
    fn shared(
        &self,
        out: &telemetry::Line<'_>,
        render: impl FnOnce(&mut telemetry::Line<'_>) -> usize,
    ) -> Option<(&str, &str)> {
        if !self.first_written.get() {
            return None;
        }
        let rendered = self.rendered.get_or_init(|| {
            let mut split = 0;
            let text = out.render(|out| split = render(out));
            self.split.set(u32::try_from(split).unwrap_or(u32::MAX));
            text.into()
        });
        let split = usize::try_from(self.split.get()).unwrap_or(usize::MAX);
        Some((rendered.get(..split)?, rendered.get(split..)?))
    }
}

/// How a request ended, for its line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Answered with a result.
    Ok,
    /// Answered with an error of this code.
    Error(i32),
    /// Cancelled by the client or a disconnect: not answered.
    Cancelled,
}

impl Outcome {
    /// The outcome of an answer.
    pub(crate) fn of<T>(answer: &Result<T, Error>) -> Self {
        match answer {
            Ok(_) => Self::Ok,
            Err(error) => Self::Error(error.code().0),
        }
    }

    /// The outcome's label, and the `outcome` field with the name of the field after it
    /// (`code` for an error, else `duration_us`) as one copy into a direct line: both from
    /// one literal.
    fn label_and_lead(self) -> (&'static str, telemetry::Lead) {
        macro_rules! outcome_then {
            ($label:literal, $next:literal) => {
                (
                    $label,
                    telemetry::Lead::new(
                        concat!(" outcome=\"", $label, "\" ", $next, "="),
                        concat!(",\"outcome\":\"", $label, "\",\"", $next, "\":"),
                    ),
                )
            };
        }
        match self {
            Self::Ok => outcome_then!("ok", "duration_us"),
            Self::Error(code) if code == crate::protocol::mcp::codes::REQUEST_TIMED_OUT.0 => {
                outcome_then!("timed_out", "code")
            }
            Self::Error(_) => outcome_then!("error", "code"),
            Self::Cancelled => outcome_then!("cancelled", "duration_us"),
        }
    }

    /// The label (`ok`, `error`, `timed_out`, `cancelled`).
    fn label(self) -> &'static str {
        self.label_and_lead().0
    }

    fn code(self) -> Option<i64> {
        match self {
            Self::Error(code) => Some(i64::from(code)),
            Self::Ok | Self::Cancelled => None,
        }
    }
}

/// Who sent a request, as its access line shows them (what the perimeter admitted).
pub(crate) trait Requester {
    /// The peer's address, if known.
    fn peer(&self) -> Option<std::net::IpAddr>;
    /// The client's `User-Agent`, if it sent one.
    fn user_agent(&self) -> Option<&str>;
    /// The subject of the client's identity.
    fn subject(&self) -> &str;
    /// The trace id of its connection (a request's own `traceparent` comes first).
    fn trace_id(&self) -> &str;
}

impl RequestRecord {
    /// Starts the record of `request`, which arrived in a session admitted as `admission`,
    /// its `_meta` read already (`meta`). When `span` (the request's) is enabled, the
    /// request's trace id (its own `traceparent`, else the connection's) is recorded in its
    /// `trace` field.
    pub(crate) fn begin(
        redaction: &Redaction,
        admission: &impl Requester,
        fields: &SessionFields,
        request: &jsonrpc::Request<'_, CallToolParams<'_>>,
        meta: Option<&RequestMeta<'_>>,
        span: &tracing::Span,
    ) -> Self {
        let started = Instant::now();
        let method = MethodLabel::of(&request.method);
        let logged = *fields
            .logged
            .get_or_init(|| tracing::enabled!(target: TARGET, tracing::Level::INFO));
        let line = if logged || !span.is_disabled() {
            let own_trace_id = meta.and_then(RequestMeta::trace_id);
            if !span.is_disabled() {
                span.record(
                    "trace",
                    own_trace_id.as_deref().unwrap_or(admission.trace_id()),
                );
            }
            logged.then(|| {
                // Enough of a long method for [`Clean`] to see that it is cut.
                let unserved_method = method.served().is_none().then(|| {
                    let kept = floor_char_boundary(&request.method, MAX_NAME_BYTES + 4);
                    SmolStr::new(&request.method[..kept])
                });
                AccessLine {
                    id: request.id.clone(),
                    unserved_method,
                    params: redaction.params(&request.params),
                    own_trace_id,
                }
            })
        } else {
            None
        };
        Self {
            started,
            method,
            line,
        }
    }

    /// When the request arrived.
    pub(crate) fn started(&self) -> Instant {
        self.started
    }

    /// The request is done: its latency goes into its method's histogram (unless it was
    /// cancelled: it got no answer), and its line is written, `fields` keeping what the
    /// session's lines share. Returns the clock read that ended it, for the caller's own
    /// bookkeeping of the same moment.
    pub(crate) fn finish(
        self,
        metrics: &Metrics,
        admission: &impl Requester,
        fields: &SessionFields,
        session: u64,
        outcome: Outcome,
    ) -> Instant {
        let finished = Instant::now();
        let elapsed = finished.saturating_duration_since(self.started);
        if outcome != Outcome::Cancelled {
            metrics.latency.observe(self.method, elapsed);
        }
        let Some(line) = self.line else {
            return finished;
        };
        let ending = Ending {
            method: self.method,
            session,
            outcome,
            duration_us: elapsed.as_micros() as u64,
        };
        // The line written by hand, as the `fmt` layer would write the event of `log`, when
        // the log is the binary's (see `telemetry`): no `tracing` dispatch, no `core::fmt`.
        let written = telemetry::write_direct(&LINE_EVENT, finished, |out| {
            line.write(out, &ending, admission, fields);
        });
        fields.first_written.set(true);
        if !written {
            line.log(&ending, admission);
        }
        finished
    }
}

/// What [`Clean`] displays `text` as: `text` itself when it is short and free of control
/// characters (no copy), else rendered into `scratch`.
fn clean<'a>(text: &'a str, scratch: &'a mut String) -> &'a str {
    let bytes = text.as_bytes();
    let dirty = text.len() > MAX_NAME_BYTES
        || bytes.iter().enumerate().any(|(i, &b)| {
            b < 0x20 || b == 0x7f || (b == 0xc2 && matches!(bytes.get(i + 1), Some(0x80..=0x9f)))
        });
    if !dirty {
        return text;
    }
    scratch.clear();
    let _ = write!(scratch, "{}", Clean(text));
    scratch
}

/// What [`Peer`] displays: an IPv4 address written by hand into `v4`, others through
/// `core::fmt` into `scratch`.
fn peer_text<'a>(
    peer: Option<std::net::IpAddr>,
    v4: &'a mut [u8; 16],
    scratch: &'a mut String,
) -> &'a str {
    match peer {
        None => "-",
        Some(std::net::IpAddr::V4(ip)) => {
            let mut len = 0;
            for (n, octet) in ip.octets().into_iter().enumerate() {
                if n > 0 {
                    v4[len] = b'.';
                    len += 1;
                }
                let mut digits = itoa::Buffer::new();
                let digits = digits.format(octet).as_bytes();
                v4[len..len + digits.len()].copy_from_slice(digits);
                len += digits.len();
            }
            std::str::from_utf8(&v4[..len]).unwrap_or_default()
        }
        Some(ip) => {
            scratch.clear();
            let _ = write!(scratch, "{ip}");
            scratch
        }
    }
}

/// A client's string as its line shows it: cut at [`MAX_NAME_BYTES`] (then ending in `…`),
/// with control characters (C0, DEL, C1) escaped as `\u{..}`, so that it cannot break or
/// color a line in either format. Written straight into the line: runs without control
/// characters are copied whole.
pub(crate) struct Clean<'a>(pub(crate) &'a str);

impl fmt::Display for Clean<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0;
        let end = floor_char_boundary(text, MAX_NAME_BYTES);
        let part = &text[..end];
        let mut copied = 0;
        for (i, c) in part.char_indices() {
            if c.is_control() {
                f.write_str(&part[copied..i])?;
                write!(f, "\\u{{{:x}}}", u32::from(c))?;
                copied = i + c.len_utf8();
            }
        }
        f.write_str(&part[copied..])?;
        if end < text.len() {
            f.write_char('…')?;
        }
        Ok(())
    }
}

/// A peer address, `-` when unknown.
struct Peer(Option<std::net::IpAddr>);

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(ip) => write!(f, "{ip}"),
            None => f.write_str("-"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, value::RawValue, Value};

    fn redaction(max: usize) -> Redaction {
        Redaction::new(&crate::config::LoggingSettings::default().redact_keys, max)
    }

    #[test]
    fn hidden_members_are_redacted_at_any_depth() {
        let params = json!({
            "name": "login",
            "arguments": {
                "user": "alice",
                "password": "hunter2",
                "nested": [{"api_key": {"id": 1}, "keep": true}, {"Refresh-Token": "r"}],
                "x": {"y": {"clientSecret": null, "z": 1.5}}
            },
            "_meta": {"authorization": "Bearer abc", "progressToken": 7}
        });
        let out: Value =
            serde_json::from_str(&redaction(10_000).apply(&params.to_string())).expect("JSON");
        assert_eq!(
            out,
            json!({
                "name": "login",
                "arguments": {
                    "user": "alice",
                    "password": "[redacted]",
                    "nested": [{"api_key": "[redacted]", "keep": true}, {"Refresh-Token": "[redacted]"}],
                    "x": {"y": {"clientSecret": "[redacted]", "z": 1.5}}
                },
                "_meta": {"authorization": "[redacted]", "progressToken": "[redacted]"}
            })
        );
    }

    #[test]
    fn values_round_trip_when_nothing_is_hidden() {
        for text in [
            r#"{}"#,
            r#"[]"#,
            r#"{"a":[1,-2,3.25,true,false,null,"\"q\" \\ \n \u0001 é"],"b":{}}"#,
            r#"{"big":18446744073709551615,"neg":-9223372036854775808,"e":1e300}"#,
        ] {
            let out = redaction(10_000).apply(text);
            let a: Value = serde_json::from_str(text).expect("input");
            let b: Value = serde_json::from_str(&out).expect("output is JSON");
            assert_eq!(a, b, "{out}");
        }
    }

    #[test]
    fn long_params_are_cut_at_the_budget() {
        let long = json!({"text": "é".repeat(10_000), "then": [1, 2, 3]}).to_string();
        let out = redaction(100).apply(&long);
        assert!(out.len() <= 100 + '…'.len_utf8(), "{} bytes", out.len());
        assert!(out.ends_with('…'), "{out}");
        assert!(out.starts_with("{\"text\":\"éé"), "{out}");
        let many = serde_json::to_string(&vec![1; 100_000]).expect("json");
        let out = redaction(64).apply(&many);
        assert!(out.len() <= 64 + 3 && out.ends_with('…'), "{out}");
    }

    #[test]
    fn names_are_matched_without_case_underscores_or_dashes() {
        let r = redaction(100);
        for hidden in [
            "password",
            "PASSWORD",
            "user_password",
            "apiKey",
            "x-api-key",
            "SessionToken",
            "set-cookie",
        ] {
            assert!(r.hides(hidden), "{hidden}");
        }
        for shown in [
            "name",
            "text",
            "user",
            "key",
            "pass",
            "tok",
            "io.modelcontextprotocol/protocolVersion",
            "io.modelcontextprotocol/clientCapabilities",
        ] {
            assert!(!r.hides(shown), "{shown}");
        }
    }

    /// The automaton answers as a plain search of each fragment in the normalized name
    /// does, for names short and long (past the 64-byte stack buffer), ASCII or not, with
    /// the fragment anywhere or broken by a separator.
    #[test]
    fn the_automaton_agrees_with_a_plain_search() {
        let r = redaction(100);
        let fragments: Vec<String> = crate::config::LoggingSettings::default()
            .redact_keys
            .iter()
            .map(|k| normalize(k))
            .collect();
        let plain = |key: &str| {
            let key = normalize(key);
            fragments.iter().any(|f| key.contains(f.as_str()))
        };
        let pieces = [
            "",
            "a",
            "X",
            "_",
            "-",
            "é",
            "Пароль",
            "io.modelcontextprotocol/",
            "pass",
            "word",
            "PassWord",
            "to",
            "ken",
            "api_",
            "Key",
            "secre",
            "t",
            "cookie",
            "signatur",
            "e",
            "private-KEY",
            "credentia",
            "l",
            "0123456789abcdef0123456789abcdef0123456789abcdef",
        ];
        let (mut hidden, mut shown) = (0, 0);
        for a in pieces {
            for b in pieces {
                for c in pieces {
                    let key = format!("{a}{b}{c}");
                    let hides = r.hides(&key);
                    assert_eq!(hides, plain(&key), "{key:?}");
                    if hides {
                        hidden += 1;
                    } else {
                        shown += 1;
                    }
                }
            }
        }
        // The names cover both answers, on both paths (stack buffer and normalized copy).
        assert!(
            hidden > 1000 && shown > 1000,
            "{hidden} hidden, {shown} shown"
        );
        assert!(r.hides(&format!("{}Пароль_password", "x".repeat(80))));
        assert!(!r.hides(&format!("{}Пароль", "x".repeat(80))));
    }

    #[test]
    fn client_strings_cannot_break_a_line() {
        assert_eq!(
            Clean("a\nb\u{1b}c\u{9b}dé").to_string(),
            "a\\u{a}b\\u{1b}c\\u{9b}dé"
        );
        assert_eq!(Clean("plain").to_string(), "plain");
        let mut json = String::new();
        push_json_string(&mut json, "q\"\\\n\u{1}\u{9b}é\u{7f}", 100);
        assert_eq!(json, r#""q\"\\\n\u0001\u009bé\u007f""#);
        assert_eq!(
            serde_json::from_str::<String>(&json).expect("valid JSON"),
            "q\"\\\n\u{1}\u{9b}é\u{7f}"
        );
        let long = Clean(&"m".repeat(1000)).to_string();
        assert_eq!(long.len(), MAX_NAME_BYTES + '…'.len_utf8());
    }
    #[test]
    fn the_direct_line_shows_what_clean_and_peer_display() {
        let long = "m".repeat(MAX_NAME_BYTES + 1);
        let exact = "é".repeat(MAX_NAME_BYTES / 2);
        for text in [
            "",
            "plain",
            "\"t1\"",
            "a\nb\u{1b}c\u{9b}dé\u{7f}",
            "\u{c2}\u{a0}",
            &long,
            &exact,
        ] {
            let mut scratch = String::from("old");
            assert_eq!(
                clean(text, &mut scratch),
                Clean(text).to_string(),
                "{text:?}"
            );
        }
        let peers = [
            None,
            Some("0.0.0.0".parse().expect("ip")),
            Some("255.255.255.255".parse().expect("ip")),
            Some("10.0.100.9".parse().expect("ip")),
            Some("::1".parse().expect("ip")),
            Some("2001:db8::ff00:42:8329".parse().expect("ip")),
            Some("::ffff:1.2.3.4".parse().expect("ip")),
        ];
        for peer in peers {
            let (mut v4, mut scratch) = ([0; 16], String::new());
            assert_eq!(
                peer_text(peer, &mut v4, &mut scratch),
                Peer(peer).to_string()
            );
        }
    }
    /// What the line shows of `params`: the quoted value [`Redaction::quoted`] made, else the
    /// JSON of [`Redaction::params`] quoted as the text format (`{:?}`) and the JSON format
    /// (a JSON string) quote it, which must then be the same.
    fn shown(r: &Redaction, params: &Params<'_, CallToolParams<'_>>) -> (String, bool) {
        match r.params(params) {
            LineParams::Quoted(quoted) => {
                let json = LineParams::Quoted(quoted.clone()).to_string();
                assert!(json.contains('"'), "a plain token: {json}");
                assert_eq!(quoted, format!("{json:?}"), "text format");
                assert_eq!(quoted, serde_json::to_string(&json).expect("json"));
                (json, true)
            }
            LineParams::Json(json) => (json, false),
            LineParams::Absent => ("-".into(), false),
        }
    }

    #[test]
    fn params_are_quoted_in_the_copy_as_the_line_would_quote_them() {
        let r = redaction(100);
        fn raw(text: &str) -> &RawValue {
            serde_json::from_str(text).expect("raw")
        }
        let cases: [(&str, bool); 11] = [
            (r#"{"name":"echo","arguments":{"text":"hi"}}"#, true),
            // A hidden value is skipped, escapes and all.
            (r#"{"password":"q\"uote é","x":1}"#, true),
            (
                r#"{"password":"p","x":[1,{"token":{"a":"}"}},null,true]}"#,
                true,
            ),
            (r#"["a",-3,{"b":[]}]"#, true),
            (r#"{"text":"é"}"#, false),
            (r#"{"text":"q\"uote"}"#, false),
            (r#"[1,{}]"#, false),
            (r#""a string""#, false),
            (r#"{ "spaced": 1 }"#, false),
            (
                r#"{"long":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}"#,
                false,
            ),
            (
                r#"{"long":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}"#,
                true,
            ),
        ];
        for (text, quoted) in cases {
            let params = Params::Raw(Some(raw(text)));
            let (json, was_quoted) = shown(&r, &params);
            assert_eq!(was_quoted, quoted, "{text}");
            let LineParams::Json(unquoted) = r.json(&params) else {
                panic!("no JSON for {text}");
            };
            assert_eq!(json, unquoted, "{text}");
        }
        assert_eq!(shown(&r, &Params::Raw(None)), ("-".into(), false));
        for (text, quoted) in [
            (
                r#"{"name":"echo","arguments":{"text":"hi","apiKey":"k"}}"#,
                true,
            ),
            (r#"{"name":"echo"}"#, true),
            (
                r#"{"name":"echo","_meta":{"progressToken":"t","n":1}}"#,
                true,
            ),
            (r#"{"name":"e\"cho","arguments":{}}"#, false),
            (r#"{"name":"écho","arguments":{}}"#, false),
            (r#"{"name":"ec\nho","arguments":{}}"#, false),
            (r#"{"name":"echo\u007f","arguments":{}}"#, false),
            (r#"{"name":"e\\cho","arguments":{}}"#, false),
            (r#"{"name":"echo","arguments":{"f":1.5}}"#, false),
        ] {
            let call: CallToolParams<'_> = serde_json::from_str(text).expect("call");
            let params = Params::Parsed(call);
            let (json, was_quoted) = shown(&r, &params);
            assert_eq!(was_quoted, quoted, "{text}");
            let LineParams::Json(unquoted) = r.json(&params) else {
                panic!("no JSON for {text}");
            };
            assert_eq!(json, unquoted, "{text}");
        }
    }

    /// A client as the perimeter admitted it.
    struct Admitted {
        peer: Option<std::net::IpAddr>,
        user_agent: Option<&'static str>,
        subject: &'static str,
        trace_id: &'static str,
    }

    impl Requester for Admitted {
        fn peer(&self) -> Option<std::net::IpAddr> {
            self.peer
        }
        fn user_agent(&self) -> Option<&str> {
            self.user_agent
        }
        fn subject(&self) -> &str {
            self.subject
        }
        fn trace_id(&self) -> &str {
            self.trace_id
        }
    }

    #[test]
    fn direct_access_lines_are_the_fmt_layers_byte_for_byte() {
        let timed_out = crate::protocol::mcp::codes::REQUEST_TIMED_OUT.0;
        let clients = [
            Admitted {
                peer: Some("10.0.100.9".parse().expect("ip")),
                user_agent: Some("node"),
                subject: "alice",
                trace_id: "4bf92f3577b34da6a3ce929d0e0e4736",
            },
            Admitted {
                peer: None,
                user_agent: None,
                subject: "a \"b\"\n\u{1b}",
                trace_id: "t=1 x",
            },
        ];
        let params = || {
            [
                LineParams::Absent,
                LineParams::Json("{\"text\":\"é \\\"q\\\"\\n\"}".into()),
                LineParams::Quoted("\"{\\\"name\\\":\\\"echo\\\"}\"".into()),
            ]
        };
        let outcomes = [
            Outcome::Ok,
            Outcome::Error(-32_601),
            Outcome::Error(timed_out),
            Outcome::Cancelled,
        ];
        // A string with what must be escaped, and numbers, which are written without a look
        // (`token_value`), but one longer than a name may be, which is cut as text is.
        let long_number = "1".repeat(MAX_NAME_BYTES + 1);
        let ids = [r#""r\u001b 1""#, "7", "-12", "1.5E+3", &long_number];
        let mut compared = 0;
        for (json, id) in [false, true]
            .into_iter()
            .flat_map(|json| ids.map(|id| (json, id)))
        {
            for client in &clients {
                for method in ["tools/call", "ping", "no/such", "a=b\n"] {
                    let label = MethodLabel::of(method);
                    let unserved_method = label.served().is_none().then(|| method.into());
                    // Which of a session's three lines have a trace id of their own: the
                    // first renders what they share in place, the second into the
                    // session's cells (with or without its own), the third copies them.
                    let own_traces = [
                        [false, false, false],
                        [true, true, true],
                        [false, true, false],
                        [true, false, true],
                    ];
                    for (outcome, which, own_traces) in outcomes.iter().flat_map(|outcome| {
                        (0..3).flat_map(move |which| {
                            own_traces.map(|own_traces| (outcome, which, own_traces))
                        })
                    }) {
                        let fields = SessionFields::default();
                        for own_trace in own_traces {
                            let line = AccessLine {
                                id: RequestId::from_json(id).expect("id"),
                                unserved_method: unserved_method.clone(),
                                params: params().into_iter().nth(which).expect("params"),
                                own_trace_id: own_trace
                                    .then(|| "0af7651916cd43dd8448eb211c80319c".into()),
                            };
                            let ending = Ending {
                                method: label,
                                session: 7,
                                outcome: *outcome,
                                duration_us: 18,
                            };
                            let ours = telemetry::lines::direct(json, &LINE_EVENT, |out| {
                                line.write(out, &ending, client, &fields)
                            });
                            fields.first_written.set(true);
                            let theirs =
                                telemetry::lines::fmt_layer(json, || line.log(&ending, client));
                            assert_eq!(
                                ours, theirs,
                                "json {json}, {id}, {method:?}, {outcome:?}, {own_traces:?}"
                            );
                            compared += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(compared, 2 * 5 * 2 * 4 * 4 * 3 * 4 * 3);
        assert_eq!(Outcome::Error(timed_out).label(), "timed_out");
        for method in [
            "initialize",
            "tools/call",
            "resources/read",
            "server/discover",
        ] {
            assert_eq!(MethodLabel::of(method).served(), Some(method));
        }
        for method in ["no/such", "tools/call ", "", "TOOLS/CALL"] {
            assert_eq!(MethodLabel::of(method).served(), None, "{method:?}");
        }
    }

    /// JSON values of every shape the copy meets: names that are hidden or not, strings
    /// with and without what rules a copy out (`"` and `\` escaped, controls, DEL, C1),
    /// non-ASCII, integers of every length and floats.
    fn any_json() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        use serde_json::Value;
        let text = || {
            proptest::string::string_regex("[a-z \"\\\\\n\u{7f}\u{85}é日{}:,]{0,12}")
                .expect("regex")
        };
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            (-99i64..99).prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            text().prop_map(Value::String),
        ];
        let name = prop_oneof![
            Just("password".to_owned()),
            Just("api_key".to_owned()),
            Just("keep".to_owned()),
            text(),
        ];
        leaf.prop_recursive(6, 48, 6, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::vec((name.clone(), inner), 0..6)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    /// Whether `value`'s compact JSON is what the copy takes: strings with nothing to
    /// escape, integers of at most 18 digits (a hidden member's value may hold anything).
    fn copyable(r: &Redaction, value: &serde_json::Value, hidden: bool) -> bool {
        use serde_json::Value;
        let plain = |s: &str| !s.contains(|c: char| c == '"' || c == '\\' || c.is_control());
        if hidden {
            return true;
        }
        match value {
            Value::Null | Value::Bool(_) => true,
            Value::Number(n) => n.as_i64().is_some_and(|n| n.unsigned_abs() < 10u64.pow(18)),
            Value::String(s) => plain(s),
            Value::Array(items) => items.iter().all(|v| copyable(r, v, hidden)),
            Value::Object(members) => members
                .iter()
                .all(|(k, v)| plain(k) && copyable(r, v, hidden || r.hides(k))),
        }
    }

    proptest::proptest! {
        /// The copy is made exactly when the value is plain, and is then the transcoding,
        /// quoted or not.
        #[test]
        fn a_copy_is_the_transcoding_whenever_one_is_made(value in any_json()) {
            let r = redaction(10_000);
            let text = serde_json::to_string(&value).expect("json");
            let mut slow = String::new();
            r.transcode(&text, &mut slow);
            let mut copy = String::new();
            let copied = r.copy_plain(&text, &mut copy, false);
            proptest::prop_assert_eq!(copied, copyable(&r, &value, false), "{}", text);
            if copied {
                proptest::prop_assert_eq!(&copy, &slow);
            }
            let mut quoted = String::new();
            let quotable = r.copy_plain(&text, &mut quoted, true);
            // Non-ASCII rules the quoted copy out where it would be copied.
            proptest::prop_assert_eq!(quotable, copied && copy.is_ascii());
            if quotable {
                proptest::prop_assert_eq!(quoted, slow.replace('"', "\\\""));
            }
        }
    }

    #[test]
    fn the_lane_scan_ends_a_plain_string_where_a_byte_scan_does() {
        // Byte by byte, what `plain_string_end` finds sixteen bytes at a time.
        fn byte_scan(bytes: &[u8], at: usize, ascii: bool) -> Option<usize> {
            for i in at..bytes.len() {
                match bytes[i] {
                    b'"' => return Some(i),
                    b'\\' | 0..=0x1f | 0x7f => return None,
                    0x80.. if ascii => return None,
                    0xc2 if matches!(bytes.get(i + 1), Some(0x80..=0x9f)) => return None,
                    _ => {}
                }
            }
            None
        }
        // Bytes next to those it looks for, then each it looks for, alone or as C1's lead,
        // at every place of texts shorter than one lane of sixteen and longer than two.
        let fillers = b"a\x00\xff\x21\x23\x20\x7e\xa0\x80\xc3";
        let specials: [&[u8]; 10] = [
            b"\"",
            b"\\",
            b"\x00",
            b"\x1f",
            b"\x7f",
            b"\x80",
            b"\xc2\x85",
            b"\xc2\x9f",
            b"\xc2\xa0",
            b"\xc2a",
        ];
        let mut compared = 0;
        for len in 0..40 {
            for special in specials {
                for put in 0..=len {
                    let mut text: Vec<u8> = (0..len)
                        .map(|n| fillers[(n + put) % fillers.len()])
                        .collect();
                    if put < len {
                        text.splice(put..(put + special.len()).min(len), special.iter().copied());
                        // A `"` after it.
                        if put + special.len() + 1 < text.len() {
                            text[put + special.len() + 1] = b'"';
                        }
                    }
                    for at in 0..=text.len() {
                        for ascii in [false, true] {
                            assert_eq!(
                                plain_string_end(&text, at, ascii),
                                byte_scan(&text, at, ascii),
                                "{text:?} from {at}, ascii {ascii}"
                            );
                            compared += 1;
                        }
                    }
                }
            }
        }
        assert!(compared > 50_000, "{compared}");
    }

    #[test]
    fn what_a_session_keeps_for_its_lines_stays_three_words() {
        // Each session holds one. A second cell (16 bytes) cost 232 B more a session at
        // 18,000: most likely the actor's allocation moving up a size class (not checked).
        assert_eq!(std::mem::size_of::<SessionFields>(), 24);
    }

    #[test]
    fn the_written_line_names_the_access_target() {
        assert_eq!(LINE_EVENT.target(), TARGET);
    }

    #[test]
    fn plain_params_are_copied_as_the_transcoding_writes_them() {
        let r = redaction(10_000);
        let copied = [
            r#"{}"#,
            r#"[]"#,
            r#"{"name":"echo","arguments":{"text":"hello é 日本 © ±"}}"#,
            r#"{"a":[1,-2,true,false,null,"x",{"b":[]}],"c":{"d":{"e":[[],[{}]]}}}"#,
            r#"{"password":"p","token":{"a":[1,{"b":"}"}],"c":"\"]"},"keep":1,"apiKey":[1,2],"x":-5}"#,
            r#"[{"secret":null},{"secret":123456789012345678},"tail"]"#,
            // A hidden value is not copied, whatever it holds.
            r#"{"password":"\"]\u0001","keep":{"token":"\u00e9\n","x":1}}"#,
            r#"{"n":999999999999999999,"m":-999999999999999999,"z":0}"#,
            r#""just a string""#,
            r#"42"#,
        ];
        for text in copied {
            let (mut fast, mut slow) = (String::new(), String::new());
            assert!(r.copy_plain(text, &mut fast, false), "{text}");
            r.transcode(text, &mut slow);
            assert_eq!(fast, slow, "{text}");
            assert_eq!(r.apply(text), slow, "{text}");
            // Quoted in the same copy: every `"` escaped, nothing else changed (ASCII only).
            let mut quoted = String::new();
            assert_eq!(r.copy_plain(text, &mut quoted, true), text.is_ascii());
            if text.is_ascii() {
                assert_eq!(quoted, slow.replace('"', "\\\""), "{text}");
            }
        }
        // Whatever the transcoding would write otherwise goes through it.
        let transcoded = [
            r#"{ "a": 1 }"#,
            r#"{"a":"esc\"aped"}"#,
            r#"{"a":"\u00e9"}"#,
            "{\"a\":\"del\u{7f}\"}",
            "{\"a\":\"c1\u{85}\"}",
            r#"{"a":1.5}"#,
            r#"{"a":1e3}"#,
            r#"{"a":-0}"#,
            r#"{"a":1234567890123456789}"#,
            r#"{"pass\u0077ord":"p"}"#,
        ];
        for text in transcoded {
            let mut fast = String::new();
            assert!(!r.copy_plain(text, &mut fast, false), "{text}");
            let mut slow = String::new();
            r.transcode(text, &mut slow);
            assert_eq!(r.apply(text), slow, "{text}");
        }
        let deep = format!("{}{}", "[".repeat(65), "]".repeat(65));
        assert!(!r.copy_plain(&deep, &mut String::new(), false));
        // At the budget, the transcoding's cut.
        let long = format!(r#"{{"text":"{}","then":[1,2,3]}}"#, "x".repeat(200));
        let small = redaction(64);
        let mut slow = String::new();
        small.transcode(&long, &mut slow);
        assert!(slow.ends_with('…'), "{slow}");
        assert_eq!(small.apply(&long), slow);
    }
}
