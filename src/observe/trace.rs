//! Trace ids (W3C Trace Context): where a request's id comes from and how one is made when a
//! client brings none. A connection takes its id from the upgrade's `traceparent` or
//! `X-Trace-Id` header; a request from its `params._meta.traceparent`, else its connection's.
//! The id goes on every log line of the request and reaches the tool's context, for calls
//! further down.

use std::sync::Arc;

/// The trace id in a `traceparent` value (`00-<32 hex>-<16 hex>-<2 hex>`), if it is one
/// (version 00 format; an all-zero id is invalid).
pub fn of_traceparent(value: &str) -> Option<&str> {
    let mut parts = value.trim().split('-');
    let (version, trace, parent, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    let valid = hex(version, 2)
        && version != "ff"
        && hex(trace, 32)
        && trace.bytes().any(|b| b != b'0')
        && hex(parent, 16)
        && hex(flags, 2);
    valid.then_some(trace)
}

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
    fn traceparent_values_are_checked() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            of_traceparent(good),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473x-00f067aa0ba902b7-01",
        ] {
            assert_eq!(of_traceparent(bad), None, "{bad}");
        }
    }

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
