//! The demo set of the `mcp-ws` binary (`builtins.set = "demo"`, the default), registered
//! through the same public API any user of the crate has ([`ServerBuilder`]): what every
//! client may rely on (`shared/design/CONTRACT.md`): tools `echo`, `add`, `sleep`, `fail`;
//! the resource `mcp-ws://demo/readme`; the prompt `greet`. A module of the binary, not of
//! the library; the tests and benches include it by path.

mod add;
mod echo;
mod fail;
mod greet;
mod readme;
mod sleep;

use mcp_ws::ServerBuilder;

/// Adds the demo set.
pub fn demo(builder: ServerBuilder) -> ServerBuilder {
    builder
        .tool(echo::tool())
        .tool(add::tool())
        .tool(sleep::tool())
        .tool(fail::tool())
        .resource(readme::resource())
        .prompt(greet::prompt())
}
