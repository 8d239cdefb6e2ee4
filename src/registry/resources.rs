//! The resource interface: a URI, its `resources/list` entry, and its contents.

use serde::Serialize;
use serde_json::{json, Value};

pub trait Resource: Send + Sync + 'static {
    fn uri(&self) -> &str;
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    fn mime_type(&self) -> &str;
    fn read(&self) -> ResourceContents;

    fn definition(&self) -> Value {
        json!({
            "uri": self.uri(),
            "name": self.name(),
            "description": self.description(),
            "mimeType": self.mime_type(),
        })
    }
}

/// Text contents of a resource, as `resources/read` returns them.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceContents {
    pub uri: String,
    pub mime_type: String,
    pub text: String,
}
