//! Transports that drive a [`Session`](crate::session::Session): the WebSocket actor the
//! server uses, and an in-memory actor for in-process tests of the protocol core.

pub mod memory;
pub mod ws;
