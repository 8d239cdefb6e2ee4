//! What decoding a hostile frame costs in memory, measured by a counting allocator
//! (`stats_alloc`, the test binary's global allocator). Its counts are the whole process's,
//! so the test runs alone in a child process of the test binary (`support::alone`), where
//! nothing else allocates meanwhile. The bytes allocated during the decode bound its peak from
//! above:
//!
//! - a 4 MiB batch of two million entries (`[0,0,…]`) over `max_batch_len` is refused
//!   having allocated under 64 KiB: at most `max_batch_len + 1` entries are kept (collecting
//!   the whole array first, as before, allocated a 32 MiB vector, 48 MiB at the peak of its
//!   last growth);
//! - a 4 MiB frame nested two million levels deep is refused by the frame scan for its depth
//!   having allocated nothing.

use crate::support::alone;
use mcp_ws::testing::jsonrpc::{decode, Decoded, FrameLimits, JsonLimit, WireError};
use mcp_ws::testing::mcp::CallToolParams;
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};
use std::alloc::System;

/// The allocator of the whole test binary (it only counts, then calls the system's): every
/// test allocates through it, and only this one reads the counts, alone in its process.
#[global_allocator]
static ALLOCATOR: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// The bytes allocated while `f` runs.
fn allocated_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let region = Region::new(ALLOCATOR);
    let out = f();
    (out, region.change().bytes_allocated)
}

#[test]
fn hostile_frames_are_refused_without_being_held() {
    if !alone::in_own_process("decode_memory::hostile_frames_are_refused_without_being_held") {
        return;
    }
    const FOUR_MIB: usize = 4 * 1024 * 1024;
    let entries = FOUR_MIB / 2;
    let batch = format!("[{}0]", "0,".repeat(entries - 1));
    let deep = format!("{}{}", "[".repeat(FOUR_MIB / 2), "]".repeat(FOUR_MIB / 2));

    let limits = FrameLimits::new(100);
    let (refused, allocated) =
        allocated_during(|| match decode::<CallToolParams<'_>>(&batch, &limits) {
            Decoded::Rejected(WireError::BatchTooLarge { limit, received }) => (limit, received),
            other => panic!("expected -32010, got {other:?}"),
        });
    assert_eq!(refused, (100, entries));
    assert!(
        allocated < 64 * 1024,
        "refusing the batch allocated {allocated} bytes"
    );

    let limits = FrameLimits::new(100).max_depth(64);
    let (kind, allocated) =
        allocated_during(|| match decode::<CallToolParams<'_>>(&deep, &limits) {
            Decoded::Rejected(WireError::LimitExceeded(exceeded)) => exceeded.kind,
            other => panic!("expected a depth refusal, got {other:?}"),
        });
    assert_eq!(kind, JsonLimit::Depth);
    assert_eq!(allocated, 0, "the depth scan allocated {allocated} bytes");
}
