//! What reaches a session from outside its own frames: its bounded [`inbox`] (worker
//! outcomes, progress, log lines, requests to the client, list changes), fed by workers,
//! tools and the change bus, and the [`throttle`]s that bound what a tool may put there.
//! Below the public API because a tool's [`RequestContext`](crate::RequestContext) writes to
//! it.

pub mod inbox;
pub mod throttle;
