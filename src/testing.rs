//! What the tests and benches reach inside the server, behind the `testing` feature: the wire
//! codec, the protocol's types, the in-memory transport, a worker on its own, the session
//! state, the metrics and the access log. Not a stable API: it follows the code.

/// How a request asks the client, and which of its log lines go out (a [`Job`] names both).
pub use crate::context::asks::{Input, LogFloor};
pub use crate::mailbox::inbox;
pub use crate::observe::{access, metrics};
pub use crate::perimeter::Admission;
pub use crate::protocol::{jsonrpc, mcp};
pub use crate::session::shared;
pub use crate::transport::memory;
pub use crate::worker::{Job, PoolShare, RequestWorker, Work};
