//! mcp-ws: a [Model Context Protocol](https://modelcontextprotocol.io) server for many
//! clients at once, over WebSocket and Streamable HTTP on one endpoint, for the session-era
//! revisions and the stateless 2026-07-28 one: your tools, resources and prompts, each
//! request in its own worker actor under per-session and global limits, with cancellation,
//! progress and requests to the client (roots, sampling, elicitation; or, for 2026-07-28
//! requests, multi round-trip results).
//!
//! ```no_run
//! use mcp_ws::{RequestContext, Server, Tool, ToolError};
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Add {
//!     /// The first number.
//!     a: f64,
//!     /// The second number.
//!     b: f64,
//! }
//!
//! async fn add(args: Add, _ctx: RequestContext) -> Result<String, ToolError> {
//!     Ok((args.a + args.b).to_string())
//! }
//!
//! fn main() -> Result<(), mcp_ws::Error> {
//!     Server::builder()
//!         .name("calculator")
//!         .tool(Tool::new("add", "Adds two numbers", add))
//!         .build()?
//!         .run() // ws://127.0.0.1:8765/mcp until SIGINT/SIGTERM
//! }
//! ```
//!
//! # What is public
//!
//! - [`Server`] / [`ServerBuilder`] / [`RunningServer`]: build, run, stop; the [`Registry`]
//!   changes what is offered while clients are connected.
//! - [`Tool`], [`Resource`], [`ResourceTemplate`], [`Prompt`]: what a server offers, each an
//!   async function run in a worker; [`tool`], [`resource`], [`prompt`] hold their details.
//! - [`RequestContext`] ([`context`]): progress, logging, cancellation, the session, and
//!   requests to the client.
//! - [`client`]: an MCP client of other servers (stdio, Streamable HTTP, WebSocket).
//! - [`model`]: content blocks and results; [`config`]: [`Settings`]; [`rollout`]: which
//!   version of a tool in several versions a session sees.
//!
//! # Layers
//!
//! The modules are layers, top to bottom; each imports only from the layers below it (the
//! tests in `layers.rs` read every `crate::` and `super::` path and hold this order, with no
//! module reaching itself again):
//!
//! 1. `server`: the builder, the routes, start and graceful shutdown.
//! 2. `gateway`: other MCP servers (stdio programs, HTTP endpoints) served as upstreams:
//!    their tools, resources and prompts registered as this server's, each call forwarded.
//! 3. `transport`: how frames travel (WebSocket, Streamable HTTP, stateless POSTs, hosted
//!    sessions, in memory) and the directory of sessions a client can reach again by id.
//! 4. `session`: the protocol core of one session, independent of the transport: lifecycle,
//!    requests in flight, batches, requests to the client, the per-method handlers, and the
//!    state every session shares.
//! 5. `perimeter`: Origin/Host, TLS, authentication, policies, rate, signatures, limits.
//!    Transports run its connection checks before a session exists; the session core calls
//!    its per-request checks.
//! 6. `cluster`: what nodes share (store, de-duplication, tasks).
//! 7. `worker`: one actor per long request (pool, deadline, cancellation, progress).
//! 8. `registry`: what is offered, its versions (`rollout`), files served from directories,
//!    and the change bus.
//! 9. The public API at the root: `tool`, `resource`, `prompt`, `context`, `model` (and
//!    `schema`, the argument checks they share); the server's `Error` is `server`'s.
//! 10. `mailbox`: a session's bounded inbox and the throttles of what tools send it.
//! 11. `observe`: access log, metrics, log setup, trace ids.
//! 12. `config`: settings, file < env < CLI.
//! 13. `client`: an MCP client (stdio, Streamable HTTP, WebSocket), what the gateway
//!     reaches its upstreams with.
//! 14. `protocol`: `jsonrpc` (the wire), `mcp` (its meaning), `mrtr` (request state),
//!     `traceparent` (W3C trace context).
//!
//! Beside the layers: `testing` (the tests' and benches' door, feature `testing`) and the
//! binary's own modules (`main.rs`, `demo/`, `conformance/`), which use the public API only.
//!
//! A text frame travels down this list and its answer back up.

#![warn(missing_docs)]
// The `testing` feature exposes internals to the tests and benches, documented for those who
// work on them, not as API; the public API is checked without it.
#![cfg_attr(feature = "testing", allow(missing_docs))]

pub mod client;
pub mod config;
pub mod context;
pub mod model;
pub mod prompt;
pub mod resource;
pub mod tool;

#[cfg(test)]
mod layers;
mod schema;

pub(crate) mod cluster;
pub(crate) mod gateway;
pub(crate) mod mailbox;
pub(crate) mod observe;
pub(crate) mod perimeter;
pub(crate) mod protocol;
pub(crate) mod registry;
pub(crate) mod server;
pub(crate) mod session;
pub(crate) mod transport;
pub(crate) mod worker;

#[cfg(feature = "testing")]
pub mod testing;

pub use observe::telemetry;
pub use registry::rollout;

pub use config::Settings;
pub use context::{ClientRequestError, RequestContext};
pub use prompt::{Prompt, PromptArgument, PromptError};
pub use registry::{Registry, RegistryError};
pub use resource::{BusyScope, Resource, ResourceError, ResourceTemplate};
pub use server::Error;
pub use server::{RunningServer, Server, ServerBuilder};
pub use tool::{Json, TaskSupport, Tool, ToolError};

/// The hasher of the server's maps: foldhash, seeded per process, so keys a client chooses
/// (request ids, idempotency keys, tool names it looks up) cannot be ground into collisions
/// offline, at a fraction of SipHash's cost for the short keys these maps hold.
pub(crate) type FastHash = foldhash::fast::RandomState;

/// Keeps `waker` in `slot` to be woken later, unless the one there already wakes the same
/// task: a future polled again and again by one task clones its waker once.
pub(crate) fn remember_waker(slot: &mut Option<std::task::Waker>, waker: &std::task::Waker) {
    if !slot.as_ref().is_some_and(|kept| kept.will_wake(waker)) {
        *slot = Some(waker.clone());
    }
}

/// Locks `mutex`, going on with its data if another thread panicked while holding it: every
/// change made under the server's mutexes is a single insert, remove or assignment, so the
/// data is consistent between any two of them.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Drops `value`, catching a panic of its `Drop`: a tool's work, or the payload of its panic
/// (std warns that dropping a payload may panic again), whose drop would otherwise unwind
/// through the worker and leave its request unanswered, its place in flight held for good.
/// The payload of such a second panic is leaked, not dropped: its own drop could panic too.
pub(crate) fn drop_catching_panics<T>(value: T) {
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(value)));
    if let Err(payload) = dropped {
        std::mem::forget(payload);
    }
}

/// The largest character boundary of `text` at or below `max`: where to cut a client's text
/// to at most `max` bytes.
pub(crate) fn floor_char_boundary(text: &str, max: usize) -> usize {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    end
}

/// Counts one more place for `key` unless it holds `limit` already; whether it did. With
/// [`give_back_place`], the per-key counts of the limits (sessions per address or identity,
/// tasks per identity): a map holding only the keys that hold places.
pub(crate) fn take_place<K: std::hash::Hash + Eq>(
    counts: &dashmap::DashMap<K, usize>,
    key: K,
    limit: usize,
) -> bool {
    take_places(counts, key, 1, limit)
}

/// [`take_place`] for `n` places at once (a share counted in bytes): taken whole, or not at
/// all when they would pass `limit`.
pub(crate) fn take_places<K: std::hash::Hash + Eq>(
    counts: &dashmap::DashMap<K, usize>,
    key: K,
    n: usize,
    limit: usize,
) -> bool {
    match counts.entry(key) {
        dashmap::Entry::Occupied(mut entry) => match entry.get().checked_add(n) {
            Some(total) if total <= limit => {
                *entry.get_mut() = total;
                true
            }
            _ => false,
        },
        dashmap::Entry::Vacant(entry) if n <= limit => {
            entry.insert(n);
            true
        }
        dashmap::Entry::Vacant(_) => false,
    }
}

/// Counts one place fewer for `key` ([`take_place`]), forgetting the key at zero.
pub(crate) fn give_back_place<K: std::hash::Hash + Eq>(
    counts: &dashmap::DashMap<K, usize>,
    key: &K,
) {
    give_back_places(counts, key, 1);
}

/// Counts `n` places fewer for `key` ([`take_places`]), forgetting the key at zero.
pub(crate) fn give_back_places<K: std::hash::Hash + Eq>(
    counts: &dashmap::DashMap<K, usize>,
    key: &K,
    n: usize,
) {
    counts.remove_if_mut(key, |_, count| {
        *count = count.saturating_sub(n);
        *count == 0
    });
}

/// Whether this is the first call this second (wall-clock seconds) of those sharing `last`:
/// the warnings that a client or a fault could repeat for every request are logged at most
/// once a second, the rest at debug level or not at all.
pub(crate) fn first_this_second(last: &std::sync::atomic::AtomicU64) -> bool {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    last.swap(now, std::sync::atomic::Ordering::Relaxed) != now
}

/// A fresh random id: 128 bits from the thread's CSPRNG (`rand`'s ChaCha, seeded from the OS
/// and reseeded as it goes), lower-case hex. Unguessable, so fit for bearer secrets (session
/// ids), and no system call per id (a trace id is made for every HTTP request that brings
/// none).
pub(crate) fn random_id() -> std::sync::Arc<str> {
    data_encoding::HEXLOWER
        .encode(&rand::random::<[u8; 16]>())
        .into()
}
