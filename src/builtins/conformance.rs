//! The fixtures of the official MCP conformance suite's server scenarios.

use crate::ServerBuilder;

/// Adds the conformance fixtures.
pub fn fixtures(builder: ServerBuilder) -> ServerBuilder {
    builder
}
