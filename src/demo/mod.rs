//! The built-in capability sets of the `mcp-ws` binary (`builtins.set`), registered through
//! the same public API any user of the crate has ([`ServerBuilder`]); a module of the binary,
//! not of the library (the tests and benches include it by path):
//!
//! - [`demo`]: what every client may rely on (`shared/design/CONTRACT.md`): tools `echo`,
//!   `add`, `sleep`, `fail`; the resource `mcp-ws://demo/readme`; the prompt `greet`.
//! - [`conformance`]: the fixtures the official MCP conformance suite's server scenarios
//!   call (`config/conformance.toml` selects it).

mod add;
pub mod conformance;
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

/// Adds the set named by `builtins.set` (`demo`, `conformance` or `none`).
pub fn by_name(set: &str, builder: ServerBuilder) -> ServerBuilder {
    match set {
        "demo" => demo(builder),
        "conformance" => conformance::fixtures(builder),
        _ => builder,
    }
}
