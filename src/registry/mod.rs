//! What the server offers: tools, resources and prompts, each kept in a `DashMap` by name
//! (or URI) and shared by all sessions. Read-mostly; handlers clone the `Arc` out and let
//! the map guard drop before anything awaits.

mod prompts;
mod resources;
mod tools;

pub use prompts::{Prompt, PromptArgument};
pub use resources::{Resource, ResourceContents};
pub use tools::{typed_tool, Arguments, Tool, ToolError, ToolFuture};

use crate::mcp::Error;
use dashmap::DashMap;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// Keys are inserted by the server only (clients can only look up), so a fast hasher is safe.
type FastHash = foldhash::fast::RandomState;

#[derive(Default)]
pub struct Registry {
    tools: DashMap<String, RegisteredTool, FastHash>,
    resources: DashMap<String, Arc<dyn Resource>, FastHash>,
    prompts: DashMap<String, Arc<dyn Prompt>, FastHash>,
}

/// A tool with its `tools/list` entry computed once, at registration.
struct RegisteredTool {
    definition: Value,
    tool: Arc<dyn Tool>,
}

impl Registry {
    pub fn add_tool(&self, tool: impl Tool) {
        let definition = json!({
            "name": tool.name(),
            "description": tool.description(),
            "inputSchema": tool.input_schema(),
        });
        self.tools.insert(
            tool.name().to_owned(),
            RegisteredTool {
                definition,
                tool: Arc::new(tool),
            },
        );
    }

    pub fn add_resource(&self, resource: impl Resource) {
        self.resources
            .insert(resource.uri().to_owned(), Arc::new(resource));
    }

    pub fn add_prompt(&self, prompt: impl Prompt) {
        self.prompts
            .insert(prompt.name().to_owned(), Arc::new(prompt));
    }

    pub fn tool(&self, name: &str) -> Result<Arc<dyn Tool>, Error> {
        self.tools
            .get(name)
            .map(|entry| entry.tool.clone())
            .ok_or_else(|| Error::UnknownTool { name: name.into() })
    }

    /// `tools/list` result, sorted by name so pages are stable.
    pub fn list_tools(&self) -> Value {
        let mut tools: Vec<Value> = self.tools.iter().map(|e| e.definition.clone()).collect();
        sort_by_key(&mut tools, "name");
        json!({ "tools": tools })
    }

    pub fn list_resources(&self) -> Value {
        let mut resources: Vec<Value> = self.resources.iter().map(|e| e.definition()).collect();
        sort_by_key(&mut resources, "uri");
        json!({ "resources": resources })
    }

    pub fn read_resource(&self, uri: &str) -> Result<Value, Error> {
        let resource = self
            .resources
            .get(uri)
            .map(|e| e.value().clone())
            .ok_or_else(|| Error::ResourceNotFound { uri: uri.into() })?;
        Ok(json!({ "contents": [resource.read()] }))
    }

    pub fn list_prompts(&self) -> Value {
        let mut prompts: Vec<Value> = self.prompts.iter().map(|e| e.definition()).collect();
        sort_by_key(&mut prompts, "name");
        json!({ "prompts": prompts })
    }

    /// `prompts/get`: checks the required arguments for every prompt, then renders it.
    pub fn get_prompt(
        &self,
        name: &str,
        arguments: &HashMap<String, String>,
    ) -> Result<Value, Error> {
        let prompt = self.prompt(name)?;
        if let Some(missing) = prompt
            .arguments()
            .iter()
            .find(|a| a.required && !arguments.contains_key(a.name))
        {
            return Err(Error::MissingPromptArgument {
                prompt: name.into(),
                argument: missing.name.into(),
            });
        }
        Ok(prompt.render(arguments))
    }

    /// `completion/complete` for a prompt argument: at most 100 values, per the spec.
    pub fn complete_prompt_argument(
        &self,
        name: &str,
        argument: &str,
        prefix: &str,
    ) -> Result<Value, Error> {
        let prompt = self.prompt(name)?;
        let mut values = prompt.complete(argument, prefix);
        let total = values.len();
        values.truncate(100);
        Ok(json!({ "completion": { "values": values, "total": total, "hasMore": total > 100 } }))
    }

    fn prompt(&self, name: &str) -> Result<Arc<dyn Prompt>, Error> {
        self.prompts
            .get(name)
            .map(|e| e.value().clone())
            .ok_or_else(|| Error::UnknownPrompt { name: name.into() })
    }
}

fn sort_by_key(items: &mut [Value], key: &str) {
    items.sort_by(|a, b| a[key].as_str().cmp(&b[key].as_str()));
}
