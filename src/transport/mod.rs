//! Transports that host a [`Session`](crate::session::Session): the WebSocket actor (one
//! socket, the session inline), Streamable HTTP (a [`hosted::HostedSession`] actor reached by
//! id, answering POSTs and SSE streams; a 2026-07-28 request on a core of its own in its
//! handler, a [`stateless::StatelessExchange`]), and an in-memory actor for in-process tests.

pub mod awaited;
pub mod directory;
pub mod events;
pub mod feed;
pub mod frames;
pub mod hosted;
pub mod http;
#[cfg(any(test, feature = "testing"))]
pub mod memory;
pub(crate) mod mirror;
pub(crate) mod socket_record;
pub mod stateless;
pub(crate) mod stream_end;
pub mod ws;
