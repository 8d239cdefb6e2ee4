//! The server: [`Server::builder`] (settings, how it presents itself, tools, resources,
//! prompts: `builder`), its routes (`routes`: `/mcp`, a WebSocket session on `GET` with an
//! upgrade and Streamable HTTP otherwise; `GET /`, a page saying how to connect; `/healthz`
//! and `/metrics`, on an admin listener of their own when `server.admin_listen` is set), and
//! running it (`run`): in the foreground ([`Server::run`], the binary) or on a background
//! thread ([`Server::spawn`], tests and embedding), until a graceful shutdown.
//!
//! Shutdown, on SIGINT/SIGTERM or `RunningServer::stop`: stop admitting sessions (a new
//! upgrade gets 503 with `Retry-After`, an answer rather than a connection left hanging),
//! tell every session (each refuses new work with -32004 but still answers what runs no user
//! code, lets its requests in flight finish for up to `shutdown.grace_ms`, answers the rest
//! with -32004, and closes once its client is quiet), wait for the sessions to be gone, then
//! stop the HTTP server.

/// How long, once the sessions have drained, connections that hold none (an upload, a
/// keep-alive) have to finish before they are dropped: the public listener's, plain or TLS
/// (`listener`), so that both stop alike (docs/operations.md counts it in the shutdown's
/// bound).
pub(crate) const CONNECTIONS_STOP_SECS: u64 = 5;

mod builder;
mod error;
mod listener;
mod routes;
mod run;
mod upgraded;

pub use builder::{Server, ServerBuilder};
pub use error::Error;
pub use run::RunningServer;
