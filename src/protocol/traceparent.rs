//! The W3C trace context a request may carry (`params._meta.traceparent` in MCP, a
//! `traceparent` header over HTTP): the trace id in it.

/// The trace id in a `traceparent` value (`00-<32 hex>-<16 hex>-<2 hex>`), if it is one
/// (version 00 format; an all-zero id is invalid).
pub fn trace_id(value: &str) -> Option<&str> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_values_are_checked() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(trace_id(good), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473x-00f067aa0ba902b7-01",
        ] {
            assert_eq!(trace_id(bad), None, "{bad}");
        }
    }
}
