//! Limits on the shape of a frame's JSON (nesting depth, string length, array length, object
//! members), checked by one byte scan of the frame before it is parsed, so that a hostile frame
//! is refused before anything is built from it. The limits are plain numbers: what they are
//! for is the caller's business.
//!
//! The scan does not validate JSON; it measures. On valid JSON its measures are exact (the
//! property tests compare them with a parse); on invalid JSON it may refuse a frame for a limit
//! where the parser would have refused it as not JSON, which is a refusal either way.

use memchr::memchr2;
use std::fmt;

/// Which limit a frame exceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonLimit {
    /// Arrays and objects nested deeper than allowed.
    Depth,
    /// A string (a member name or a value) longer than allowed, in bytes as written (escapes
    /// included).
    StringBytes,
    /// An array with more entries than allowed (the batch array itself is exempt: it has a
    /// limit of its own).
    ArrayLen,
    /// An object with more members than allowed.
    ObjectMembers,
}

impl JsonLimit {
    /// A short name for `data.kind` of the error and for metrics.
    pub fn name(self) -> &'static str {
        match self {
            Self::Depth => "depth",
            Self::StringBytes => "string",
            Self::ArrayLen => "array",
            Self::ObjectMembers => "object",
        }
    }
}

/// A limit exceeded, and its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exceeded {
    /// Which limit.
    pub kind: JsonLimit,
    /// Its value.
    pub limit: usize,
}

impl fmt::Display for Exceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let limit = self.limit;
        match self.kind {
            JsonLimit::Depth => write!(f, "JSON nested deeper than {limit} levels"),
            JsonLimit::StringBytes => write!(f, "a JSON string longer than {limit} bytes"),
            JsonLimit::ArrayLen => write!(f, "a JSON array longer than {limit} entries"),
            JsonLimit::ObjectMembers => {
                write!(f, "a JSON object with more than {limit} members")
            }
        }
    }
}

/// What a frame may hold. Built with [`FrameLimits::new`] (only the batch limit) and the
/// setters; a setter given 0 leaves that limit off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameLimits {
    max_batch_len: usize,
    max_depth: usize,
    max_string_bytes: usize,
    max_array_len: usize,
    max_object_members: usize,
}

const OFF: usize = usize::MAX;

fn or_off(limit: usize) -> usize {
    if limit == 0 {
        OFF
    } else {
        limit
    }
}

impl FrameLimits {
    /// At most `max_batch_len` entries in a batch, and no limit on the JSON's shape.
    pub const fn new(max_batch_len: usize) -> Self {
        Self {
            max_batch_len,
            max_depth: OFF,
            max_string_bytes: OFF,
            max_array_len: OFF,
            max_object_members: OFF,
        }
    }

    /// Arrays and objects nested at most `levels` deep (0: no limit).
    pub fn max_depth(mut self, levels: usize) -> Self {
        self.max_depth = or_off(levels);
        self
    }

    /// Strings at most `bytes` long as written, escapes included (0: no limit).
    pub fn max_string_bytes(mut self, bytes: usize) -> Self {
        self.max_string_bytes = or_off(bytes);
        self
    }

    /// Arrays of at most `entries` entries (0: no limit). A batch's own array is not one of
    /// them: it has the batch limit.
    pub fn max_array_len(mut self, entries: usize) -> Self {
        self.max_array_len = or_off(entries);
        self
    }

    /// Objects of at most `members` members (0: no limit).
    pub fn max_object_members(mut self, members: usize) -> Self {
        self.max_object_members = or_off(members);
        self
    }

    /// The most entries a batch may have.
    pub fn batch_len(&self) -> usize {
        self.max_batch_len
    }

    /// Whether any shape limit is on (otherwise frames are not scanned at all).
    #[cfg(any(test, feature = "testing"))]
    pub fn scans(&self) -> bool {
        self.floor() != OFF
    }

    /// The longest frame that cannot exceed any shape limit: a frame of `n` bytes nests at
    /// most `n` deep, holds no string longer than `n` and no container of more than `n`
    /// entries. Shorter frames are not scanned.
    fn floor(&self) -> usize {
        self.max_depth
            .min(self.max_string_bytes)
            .min(self.max_array_len)
            .min(self.max_object_members)
    }

    /// A bound cheaper than the scan (a count the compiler vectorizes, where the scan steps
    /// through strings): a frame with no more opening brackets than `max_depth` cannot nest
    /// deeper, one with fewer commas than an entry limit has no container over it, and one
    /// no longer than `max_string_bytes` no string over it. Most frames pass it, so only
    /// frames that might exceed a limit are scanned.
    fn cannot_exceed(&self, bytes: &[u8]) -> bool {
        if bytes.len() > self.max_string_bytes {
            return false;
        }
        let entries = self.max_array_len.min(self.max_object_members);
        // `[` and `{` differ in one bit only (0x5B, 0x7B).
        let (opens, commas) = count2(bytes, |byte| byte | 0x20 == b'{', |byte| byte == b',');
        opens <= self.max_depth && (entries == OFF || commas < entries)
    }

    fn counts_entries(&self) -> bool {
        self.max_array_len != OFF || self.max_object_members != OFF
    }

    /// Scans `text` once; the first limit it exceeds, if any.
    ///
    /// # Errors
    /// The limit exceeded.
    pub fn check(&self, text: &str) -> Result<(), Exceeded> {
        if text.len() <= self.floor() {
            return Ok(());
        }
        let bytes = text.as_bytes();
        if self.cannot_exceed(bytes) {
            return Ok(());
        }
        let counting = self.counts_entries();
        let mut open = Containers::default();
        // The outermost array is a batch: its length is the batch limit's business.
        let batch = bytes
            .iter()
            .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
            == Some(&b'[');
        let exceeded = |kind, limit| Err(Exceeded { kind, limit });
        let mut i = 0;
        while i < bytes.len() {
            let byte = bytes[i];
            i += 1;
            match byte {
                b'"' => {
                    let start = i;
                    // To the closing quote, stepping over escapes (`\"` included).
                    loop {
                        match memchr2(b'"', b'\\', bytes.get(i..).unwrap_or_default()) {
                            Some(at) if bytes[i + at] == b'"' => {
                                i += at;
                                break;
                            }
                            Some(at) => i += at + 2,
                            None => {
                                i = bytes.len();
                                break;
                            }
                        }
                    }
                    let end = i.min(bytes.len());
                    if end - start > self.max_string_bytes {
                        return exceeded(JsonLimit::StringBytes, self.max_string_bytes);
                    }
                    // Past the closing quote (or the end, for a string that never closes).
                    i = end + 1;
                }
                b'[' | b'{' => {
                    if open.depth >= self.max_depth {
                        return exceeded(JsonLimit::Depth, self.max_depth);
                    }
                    open.push(byte == b'{', counting);
                }
                b']' | b'}' => open.pop(counting),
                b',' if counting => {
                    let Some((is_object, separators)) = open.separate() else {
                        continue;
                    };
                    // `separators` commas: at least one entry more than that.
                    if is_object {
                        if separators >= self.max_object_members {
                            return exceeded(JsonLimit::ObjectMembers, self.max_object_members);
                        }
                    } else if separators >= self.max_array_len && !(batch && open.depth == 1) {
                        return exceeded(JsonLimit::ArrayLen, self.max_array_len);
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// How many bytes match `first` and how many match `second`, in one pass: counted in runs of
/// 255 in byte-wide counters, which the compiler turns into vector compares and adds.
fn count2(bytes: &[u8], first: impl Fn(u8) -> bool, second: impl Fn(u8) -> bool) -> (usize, usize) {
    bytes.chunks(255).fold((0, 0), |(a, b), run| {
        let (n, m) = run.iter().fold((0u8, 0u8), |(n, m), &byte| {
            (
                n.wrapping_add(u8::from(first(byte))),
                m.wrapping_add(u8::from(second(byte))),
            )
        });
        (a + usize::from(n), b + usize::from(m))
    })
}

/// The containers open at the scan's position: their depth, and for each the commas seen at
/// its level and whether it is an object (kept only when entries are counted). The first
/// levels live inline, so a scan allocates only for frames nested deeper than that.
struct Containers {
    depth: usize,
    inline: [usize; INLINE_LEVELS],
    deeper: Vec<usize>,
}

const INLINE_LEVELS: usize = 32;

impl Default for Containers {
    fn default() -> Self {
        Self {
            depth: 0,
            inline: [0; INLINE_LEVELS],
            deeper: Vec::new(),
        }
    }
}

impl Containers {
    fn push(&mut self, is_object: bool, counting: bool) {
        if counting {
            let slot = usize::from(is_object);
            if self.depth < INLINE_LEVELS {
                self.inline[self.depth] = slot;
            } else {
                self.deeper.push(slot);
            }
        }
        self.depth += 1;
    }

    fn pop(&mut self, counting: bool) {
        // A closing bracket with nothing open is not JSON: the parser will say so.
        if self.depth == 0 {
            return;
        }
        self.depth -= 1;
        if counting && self.depth >= INLINE_LEVELS {
            self.deeper.pop();
        }
    }

    /// Counts a comma in the innermost container: whether it is an object, and its commas so
    /// far. `None` outside any container (not JSON).
    fn separate(&mut self) -> Option<(bool, usize)> {
        let top = self.depth.checked_sub(1)?;
        let slot = if top < INLINE_LEVELS {
            &mut self.inline[top]
        } else {
            self.deeper.last_mut()?
        };
        *slot += 2;
        Some((*slot & 1 == 1, *slot >> 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_scanned_only_when_a_shape_limit_is_on() {
        let limits = FrameLimits::new(100).max_depth(64).max_array_len(0);
        assert!(limits.scans());
        assert!(!FrameLimits::new(100).scans());
    }

    fn all(limit: usize) -> FrameLimits {
        FrameLimits::new(1000)
            .max_depth(limit)
            .max_string_bytes(limit)
            .max_array_len(limit)
            .max_object_members(limit)
    }

    fn kind(limits: &FrameLimits, text: &str) -> Option<JsonLimit> {
        limits.check(text).err().map(|e| e.kind)
    }

    #[test]
    fn each_limit_is_inclusive() {
        let depth = FrameLimits::new(10).max_depth(3);
        assert_eq!(kind(&depth, r#"{"a":[{"b":1}]}"#), None);
        assert_eq!(kind(&depth, r#"{"a":[{"b":[1]}]}"#), Some(JsonLimit::Depth));

        let string = FrameLimits::new(10).max_string_bytes(3);
        assert_eq!(kind(&string, r#"{"abc":"xyz","ab":"\"y"}"#), None);
        assert_eq!(
            kind(&string, r#"{"abc":"wxyz"}"#),
            Some(JsonLimit::StringBytes)
        );
        assert_eq!(kind(&string, r#"{"abcd":1}"#), Some(JsonLimit::StringBytes));
        // Measured as written: an escape counts its backslash.
        assert_eq!(
            kind(&string, r#"{"a":"\"\""}"#),
            Some(JsonLimit::StringBytes)
        );

        let array = FrameLimits::new(10).max_array_len(3);
        assert_eq!(kind(&array, r#"{"a":[1,[2,3,4],"5,6,7"]}"#), None);
        assert_eq!(
            kind(&array, r#"{"a":[1,2,3,4]}"#),
            Some(JsonLimit::ArrayLen)
        );
        assert_eq!(
            kind(&array, r#"{"a":[[1,2,3,4]]}"#),
            Some(JsonLimit::ArrayLen)
        );

        let object = FrameLimits::new(10).max_object_members(2);
        assert_eq!(kind(&object, r#"{"a":{"b":1,"c":2},"d":[1,2,3]}"#), None);
        assert_eq!(
            kind(&object, r#"{"a":1,"b":2,"c":3}"#),
            Some(JsonLimit::ObjectMembers)
        );
    }

    #[test]
    fn the_batch_array_is_exempt_from_the_array_limit_but_not_its_entries() {
        let limits = FrameLimits::new(10).max_array_len(2);
        assert_eq!(kind(&limits, " [{}, {}, {}, {}]"), None);
        assert_eq!(
            kind(&limits, "[{}, {\"a\":[1,2,3]}]"),
            Some(JsonLimit::ArrayLen)
        );
        assert_eq!(kind(&limits, "[[1,2,3]]"), Some(JsonLimit::ArrayLen));
    }

    #[test]
    fn deep_frames_count_past_the_inline_levels() {
        let limits = FrameLimits::new(10).max_array_len(2);
        let deep = 100;
        let ok = format!("{}1,2{}", "[".repeat(deep), "]".repeat(deep));
        assert_eq!(kind(&limits, &format!("{{\"a\":{ok}}}")), None);
        let bad = format!(
            "{{\"a\":{}[1,2],1,2,3{}}}",
            "[".repeat(deep),
            "]".repeat(deep)
        );
        assert_eq!(kind(&limits, &bad), Some(JsonLimit::ArrayLen));
    }

    #[test]
    fn off_limits_do_not_scan_and_short_frames_are_not_scanned() {
        let off = FrameLimits::new(10);
        assert!(!off.scans());
        assert_eq!(kind(&off, &"[".repeat(10_000)), None);
        let limits = all(8);
        assert!(limits.scans());
        // 8 bytes cannot nest 9 deep, nor hold a 9-byte string.
        assert_eq!(kind(&limits, "[[[[[[[["), None);
        assert_eq!(kind(&limits, "[[[[[[[[["), Some(JsonLimit::Depth));
    }

    #[test]
    fn broken_json_is_measured_without_panicking() {
        let limits = all(4);
        for text in [
            "]]]]]]]]]]",
            "\"unterminated",
            "\"ends in escape\\",
            ",,,,,,,,,",
            "}{}{}{}{",
            "{\"a\":\"\\",
            "\\\\\\\\\\\"",
        ] {
            let _ = limits.check(text);
        }
    }
}
