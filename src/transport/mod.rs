//! Transports that host a [`Session`](crate::session::Session): the WebSocket actor (one
//! socket, the session inline), Streamable HTTP (a [`hosted::HostedSession`] actor reached by
//! id, answering POSTs and SSE streams), and an in-memory actor for in-process tests.

pub mod events;
pub mod hosted;
pub mod http;
pub mod memory;
pub mod ws;
