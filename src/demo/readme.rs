//! The readable demo resource `mcp-ws://demo/readme`.

use mcp_ws::Resource;

/// The resource.
pub fn resource() -> Resource {
    Resource::text(
        "mcp-ws://demo/readme",
        "readme",
        "text/markdown",
        "# mcp-ws demo\n\nTools: echo, add, sleep, fail. Prompt: greet.\n",
    )
    .description("What this demo server offers.")
}
