//! The capabilities the server declares to a session: from what is registered (a kind is
//! declared once anything of it was registered) and what the session's version has.
//! Declared truthfully: the server sends `list_changed` for every kind it declares, and
//! resource updates to subscribers.

use super::ProtocolVersion;
use serde_json::{json, Map, Value};

/// The `capabilities` member of the `initialize` result.
pub fn server_capabilities(version: ProtocolVersion, offers: Offers) -> Value {
    let mut caps = Map::new();
    if offers.tools {
        caps.insert("tools".into(), json!({ "listChanged": true }));
    }
    if offers.resources {
        caps.insert(
            "resources".into(),
            json!({ "subscribe": true, "listChanged": true }),
        );
    }
    if offers.prompts {
        caps.insert("prompts".into(), json!({ "listChanged": true }));
    }
    // Any tool may log.
    caps.insert("logging".into(), json!({}));
    // `completions` appeared in 2025-03-26.
    if offers.completions && version.has_completions() {
        caps.insert("completions".into(), json!({}));
    }
    // Extensions are a 2026-07-28 notion; tasks are offered only there.
    if offers.tasks && version.is_stateless() {
        caps.insert("extensions".into(), json!({ super::TASKS_EXTENSION: {} }));
    }
    Value::Object(caps)
}

/// The kinds a server offers: what its registry holds (`Registry::offers`), which decides
/// the capabilities it declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Offers {
    /// Any tool.
    pub tools: bool,
    /// Any resource or resource template.
    pub resources: bool,
    /// Any prompt.
    pub prompts: bool,
    /// Anything that completes arguments.
    pub completions: bool,
    /// A tool whose calls may become tasks (2026-07-28 tasks extension).
    pub tasks: bool,
}

/// The `requiredCapabilities` object naming a capability the client lacks (as
/// `ClientRequestError::NotSupported` names it: `sampling`, `elicitation.url`, …).
pub fn required_capabilities(capability: &str) -> Value {
    match capability.split_once('.') {
        // A form is what a bare `elicitation: {}` declares.
        Some(("elicitation", "form")) => json!({ "elicitation": {} }),
        Some((outer, inner)) => json!({ outer: { inner: {} } }),
        None => json!({ capability: {} }),
    }
}

/// The `requiredCapabilities` object of a request that needs the tasks extension.
pub fn required_tasks_extension() -> Value {
    json!({ "extensions": { super::TASKS_EXTENSION: {} } })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_capabilities_are_named_as_client_capabilities() {
        assert_eq!(required_capabilities("sampling"), json!({"sampling": {}}));
        assert_eq!(
            required_capabilities("sampling.tools"),
            json!({"sampling": {"tools": {}}})
        );
        assert_eq!(
            required_capabilities("elicitation.form"),
            json!({"elicitation": {}})
        );
        assert_eq!(
            required_capabilities("elicitation.url"),
            json!({"elicitation": {"url": {}}})
        );
    }
}
