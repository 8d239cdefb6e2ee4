//! What the nodes of a deployment share, through Redis when `redis.url` is set and in this
//! node's memory otherwise: the [`store`] (de-duplication entries, nonces, the change-bus
//! bridge), [`dedup`] (idempotency keys and retried request ids) and [`tasks`] (the
//! 2026-07-28 tasks extension).

pub mod dedup;
pub mod store;
pub mod tasks;
