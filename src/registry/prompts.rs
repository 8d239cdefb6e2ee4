//! The prompt interface: declared arguments (the registry checks required ones for every
//! prompt), rendering, and completion of argument values.

use serde_json::{json, Value};
use std::collections::HashMap;

pub struct PromptArgument {
    pub name: &'static str,
    pub description: &'static str,
    pub required: bool,
}

pub trait Prompt: Send + Sync + 'static {
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    fn arguments(&self) -> &[PromptArgument];
    /// Renders the `prompts/get` result; required arguments are known to be present.
    fn render(&self, arguments: &HashMap<String, String>) -> Value;
    /// Candidate values for `argument` starting with `prefix`.
    fn complete(&self, _argument: &str, _prefix: &str) -> Vec<String> {
        Vec::new()
    }

    fn definition(&self) -> Value {
        let arguments: Vec<Value> = self
            .arguments()
            .iter()
            .map(
                |a| json!({ "name": a.name, "description": a.description, "required": a.required }),
            )
            .collect();
        json!({ "name": self.name(), "description": self.description(), "arguments": arguments })
    }
}
