//! The demo capabilities every client may rely on (`shared/design/CONTRACT.md`): tools
//! `echo`, `add`, `sleep`, `fail`; the resource `mcp-ws://demo/readme`; the prompt `greet`.

mod add;
mod echo;
mod fail;
mod greet;
mod readme;
mod sleep;

use crate::registry::Registry;

/// A registry holding all demo capabilities.
pub fn registry() -> Registry {
    let registry = Registry::default();
    registry.add_tool(echo::tool());
    registry.add_tool(add::tool());
    registry.add_tool(sleep::tool());
    registry.add_tool(fail::tool());
    registry.add_resource(readme::Readme);
    registry.add_prompt(greet::Greet);
    registry
}
