//! The `greet` prompt, with one required argument `name` (and completion of it).

use crate::registry::{Prompt, PromptArgument};
use serde_json::{json, Value};
use std::collections::HashMap;

const KNOWN_NAMES: [&str; 5] = ["Ada", "Alan", "Barbara", "Grace", "Linus"];

pub struct Greet;

impl Prompt for Greet {
    fn name(&self) -> &str {
        "greet"
    }

    fn description(&self) -> &str {
        "Asks the model to greet someone by name."
    }

    fn arguments(&self) -> &[PromptArgument] {
        &[PromptArgument {
            name: "name",
            description: "Who to greet.",
            required: true,
        }]
    }

    fn render(&self, arguments: &HashMap<String, String>) -> Value {
        let name = arguments.get("name").map_or("", String::as_str);
        json!({
            "description": "A warm greeting",
            "messages": [{
                "role": "user",
                "content": { "type": "text", "text": format!("Please greet {name} warmly.") }
            }]
        })
    }

    fn complete(&self, argument: &str, prefix: &str) -> Vec<String> {
        if argument != "name" {
            return Vec::new();
        }
        KNOWN_NAMES
            .iter()
            .filter(|n| n.starts_with(prefix))
            .map(|n| (*n).to_owned())
            .collect()
    }
}
