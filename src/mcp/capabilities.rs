//! The capabilities the server declares, per negotiated version. Declared truthfully: only
//! what the server actually serves (no `listChanged` or `subscribe`, since the registries do
//! not change at run time and there are no subscriptions).

use super::{Capability, ProtocolVersion};
use serde_json::{json, Map, Value};

pub fn server_capabilities(version: ProtocolVersion) -> Value {
    let mut caps = Map::new();
    let all = [
        (Capability::Tools, "tools", json!({ "listChanged": false })),
        (
            Capability::Resources,
            "resources",
            json!({ "subscribe": false, "listChanged": false }),
        ),
        (
            Capability::Prompts,
            "prompts",
            json!({ "listChanged": false }),
        ),
        (Capability::Logging, "logging", json!({})),
        (Capability::Completions, "completions", json!({})),
    ];
    for (capability, name, value) in all {
        if version >= capability.since() {
            caps.insert(name.to_owned(), value);
        }
    }
    Value::Object(caps)
}
