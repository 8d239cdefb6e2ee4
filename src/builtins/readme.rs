//! The readable demo resource `mcp-ws://demo/readme`.

use crate::registry::{Resource, ResourceContents};

pub struct Readme;

const URI: &str = "mcp-ws://demo/readme";

impl Resource for Readme {
    fn uri(&self) -> &str {
        URI
    }

    fn name(&self) -> &str {
        "readme"
    }

    fn description(&self) -> &str {
        "What this demo server offers."
    }

    fn mime_type(&self) -> &str {
        "text/markdown"
    }

    fn read(&self) -> ResourceContents {
        ResourceContents {
            uri: URI.to_owned(),
            mime_type: "text/markdown".to_owned(),
            text: "# mcp-ws demo\n\nTools: echo, add, sleep, fail. Prompt: greet.\n".to_owned(),
        }
    }
}
