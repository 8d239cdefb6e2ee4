//! Trace ids (W3C Trace Context): where a request's id comes from and how one is made when a
//! client brings none. A connection takes its id from the upgrade's `traceparent` or
//! `X-Trace-Id` header; a request from its `params._meta.traceparent`, else its connection's.
//! The id goes on every log line of the request and reaches the tool's context, for calls
//! further down.

use std::sync::Arc;

/// An `X-Trace-Id` value, if it is usable as a trace id in logs: 1 to 64 characters of
/// `[A-Za-z0-9._-]` (anything else could forge log structure).
pub fn of_header(value: &str) -> Option<&str> {
    let value = value.trim();
    let safe = (1..=64).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    safe.then_some(value)
}

/// A fresh trace id: 128 random bits, hex (see `crate::random_id`).
pub fn generate() -> Arc<str> {
    crate::random_id()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_ids_must_be_safe_for_logs() {
        assert_eq!(of_header(" req-42.a_b "), Some("req-42.a_b"));
        assert_eq!(of_header("a\nfake=log"), None);
        assert_eq!(of_header(&"x".repeat(65)), None);
        let (a, b) = (generate(), generate());
        assert_eq!(a.len(), 32);
        assert!(
            a.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')),
            "{a}"
        );
        assert_ne!(a, b, "fresh ids differ");
    }
}
